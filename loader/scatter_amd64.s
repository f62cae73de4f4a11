#include "textflag.h"

// func scatterLinesNT(dst, src unsafe.Pointer, slot *int64, n, lines int)
//
// Row i (lines 64-byte lines of src, in order) goes to row slot[i] of dst,
// with non-temporal stores; one fence at the end.
TEXT ·scatterLinesNT(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ lines+32(FP), R8
	TESTQ CX, CX
	JE done
	MOVQ R8, R9
	SHLQ $6, R9 // row bytes
row:
	MOVQ (BX), AX
	IMULQ R9, AX
	ADDQ DI, AX // the row's first line in dst
	MOVQ R8, DX
line:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVNTDQ Y0, (AX)
	VMOVNTDQ Y1, 32(AX)
	ADDQ $64, SI
	ADDQ $64, AX
	DECQ DX
	JNE line
	ADDQ $8, BX
	DECQ CX
	JNE row
	SFENCE
	VZEROUPPER
done:
	RET

// The scatterAhead functions store row i of src at row slot[i] of dst,
// asking for the line that row i+64 goes to first (PREFETCHW, encoded as
// bytes: the assembler lacks it; a CPU without it takes it as a NOP).
// n > 64 rows prefetch; the last 64 are stored without. SCATTER_AHEAD is
// one for rows of WIDTH bytes (1 << SHIFT), moved with MOV, stored at
// (DI)(DX*WIDTH).
#define SCATTER_AHEAD(SHIFT, WIDTH, MOV) \
	MOVQ dst+0(FP), DI; \
	MOVQ src+8(FP), SI; \
	MOVQ slot+16(FP), BX; \
	MOVQ n+24(FP), CX; \
	CMPQ CX, $64; \
	JLE tail; \
ahead: \
	MOVQ 512(BX), AX; \
	SHLQ $SHIFT, AX; \
	ADDQ DI, AX; \
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08; \
	MOVQ (BX), DX; \
	MOV (SI), R8; \
	MOV R8, (DI)(DX*WIDTH); \
	ADDQ $8, BX; \
	ADDQ $WIDTH, SI; \
	DECQ CX; \
	CMPQ CX, $64; \
	JG ahead; \
tail: \
	TESTQ CX, CX; \
	JE done; \
rest: \
	MOVQ (BX), DX; \
	MOV (SI), R8; \
	MOV R8, (DI)(DX*WIDTH); \
	ADDQ $8, BX; \
	ADDQ $WIDTH, SI; \
	DECQ CX; \
	JNE rest; \
done: \
	RET

// func scatterAhead8(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead8(SB), NOSPLIT, $0-32
	SCATTER_AHEAD(3, 8, MOVQ)

// func scatterAhead4(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead4(SB), NOSPLIT, $0-32
	SCATTER_AHEAD(2, 4, MOVL)

// func scatterAhead2(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead2(SB), NOSPLIT, $0-32
	SCATTER_AHEAD(1, 2, MOVW)

// func scatterAhead1(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead1(SB), NOSPLIT, $0-32
	SCATTER_AHEAD(0, 1, MOVB)

// func scatterAheadWords(dst, src unsafe.Pointer, slot *int64, n, words int)
//
// Rows of words 8-byte words; asks for the lines of row i+64's first and
// last byte.
TEXT ·scatterAheadWords(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ words+32(FP), R9
	MOVQ R9, R10
	SHLQ $3, R10 // row bytes
	TESTQ CX, CX
	JE dw
rw:
	CMPQ CX, $64
	JLE sw
	MOVQ 512(BX), AX
	IMULQ R10, AX
	ADDQ DI, AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	LEAQ -1(AX)(R10*1), AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
sw:
	MOVQ (BX), AX
	IMULQ R10, AX
	ADDQ DI, AX
	MOVQ R9, DX
ww:
	MOVQ (SI), R8
	MOVQ R8, (AX)
	ADDQ $8, SI
	ADDQ $8, AX
	DECQ DX
	JNE ww
	ADDQ $8, BX
	DECQ CX
	JNE rw
dw:
	RET
