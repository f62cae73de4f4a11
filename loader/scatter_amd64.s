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
// n > 64 rows prefetch; the last 64 are stored without.

// func scatterAhead8(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	CMPQ CX, $64
	JLE t8
l8:
	MOVQ 512(BX), AX
	SHLQ $3, AX
	ADDQ DI, AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	MOVQ (BX), DX
	MOVQ (SI), R8
	MOVQ R8, (DI)(DX*8)
	ADDQ $8, BX
	ADDQ $8, SI
	DECQ CX
	CMPQ CX, $64
	JG l8
t8:
	TESTQ CX, CX
	JE d8
r8:
	MOVQ (BX), DX
	MOVQ (SI), R8
	MOVQ R8, (DI)(DX*8)
	ADDQ $8, BX
	ADDQ $8, SI
	DECQ CX
	JNE r8
d8:
	RET

// func scatterAhead4(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead4(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	CMPQ CX, $64
	JLE t4
l4:
	MOVQ 512(BX), AX
	SHLQ $2, AX
	ADDQ DI, AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	MOVQ (BX), DX
	MOVL (SI), R8
	MOVL R8, (DI)(DX*4)
	ADDQ $8, BX
	ADDQ $4, SI
	DECQ CX
	CMPQ CX, $64
	JG l4
t4:
	TESTQ CX, CX
	JE d4
r4:
	MOVQ (BX), DX
	MOVL (SI), R8
	MOVL R8, (DI)(DX*4)
	ADDQ $8, BX
	ADDQ $4, SI
	DECQ CX
	JNE r4
d4:
	RET

// func scatterAhead2(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	CMPQ CX, $64
	JLE t2
l2:
	MOVQ 512(BX), AX
	SHLQ $1, AX
	ADDQ DI, AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	MOVQ (BX), DX
	MOVW (SI), R8
	MOVW R8, (DI)(DX*2)
	ADDQ $8, BX
	ADDQ $2, SI
	DECQ CX
	CMPQ CX, $64
	JG l2
t2:
	TESTQ CX, CX
	JE d2
r2:
	MOVQ (BX), DX
	MOVW (SI), R8
	MOVW R8, (DI)(DX*2)
	ADDQ $8, BX
	ADDQ $2, SI
	DECQ CX
	JNE r2
d2:
	RET

// func scatterAhead1(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterAhead1(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	CMPQ CX, $64
	JLE t1
l1:
	MOVQ 512(BX), AX
	ADDQ DI, AX
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	MOVQ (BX), DX
	MOVB (SI), R8
	MOVB R8, (DI)(DX*1)
	ADDQ $8, BX
	ADDQ $1, SI
	DECQ CX
	CMPQ CX, $64
	JG l1
t1:
	TESTQ CX, CX
	JE d1
r1:
	MOVQ (BX), DX
	MOVB (SI), R8
	MOVB R8, (DI)(DX*1)
	ADDQ $8, BX
	ADDQ $1, SI
	DECQ CX
	JNE r1
d1:
	RET

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
