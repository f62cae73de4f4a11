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
