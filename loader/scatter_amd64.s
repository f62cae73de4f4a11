#include "textflag.h"

// func scatterLinesNT(dst, src unsafe.Pointer, slot *int64, n int)
TEXT ·scatterLinesNT(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ slot+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JE done
loop:
	MOVQ (BX), AX
	SHLQ $6, AX
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVNTDQ Y0, (DI)(AX*1)
	VMOVNTDQ Y1, 32(DI)(AX*1)
	ADDQ $64, SI
	ADDQ $8, BX
	DECQ CX
	JNE loop
	SFENCE
	VZEROUPPER
done:
	RET
