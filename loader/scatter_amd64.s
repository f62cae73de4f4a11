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

// func prefetchSpans(dst unsafe.Pointer, fill0, fill *int64, nb int, batchBytes, per int64)
//
// For each batch b < nb, asks for the 64-byte lines of dst from
// b*batchBytes + fill0[b]*per to b*batchBytes + fill[b]*per, to be
// written (PREFETCHW): the stores that follow find them in the cache.
TEXT ·prefetchSpans(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), R10
	MOVQ fill0+8(FP), SI
	MOVQ fill+16(FP), BX
	MOVQ nb+24(FP), CX
	MOVQ batchBytes+32(FP), R8
	MOVQ per+40(FP), R9
	TESTQ CX, CX
	JE pdone
pbatch:
	MOVQ (SI), AX
	IMULQ R9, AX
	MOVQ (BX), DX
	IMULQ R9, DX
	ADDQ R10, AX
	ADDQ R10, DX
	ANDQ $-64, AX
pspan:
	CMPQ AX, DX
	JAE pnext
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08 // PREFETCHW (AX)
	ADDQ $64, AX
	JMP pspan
pnext:
	ADDQ R8, R10
	ADDQ $8, SI
	ADDQ $8, BX
	DECQ CX
	JNE pbatch
pdone:
	RET
