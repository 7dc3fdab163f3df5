#include "textflag.h"

// func sum2F64AVX2(d, a, b *float64, n int)
// Eight float64s a step in two 256-bit registers: both loads of a step
// come before its stores, so d may be a or b.
TEXT ·sum2F64AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ n+24(FP), CX
	SHLQ $3, CX
	XORQ AX, AX

loop2:
	CMPQ    AX, CX
	JAE     done2
	VMOVUPD (SI)(AX*1), Y0
	VMOVUPD 32(SI)(AX*1), Y1
	VADDPD  (R8)(AX*1), Y0, Y0
	VADDPD  32(R8)(AX*1), Y1, Y1
	VMOVUPD Y0, (DI)(AX*1)
	VMOVUPD Y1, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     loop2

done2:
	VZEROUPPER
	RET

// func sum4F64AVX2(d, a, b, c, e *float64, n int)
// d = ((a + b) + c) + e, eight float64s a step, loads before stores.
TEXT ·sum4F64AVX2(SB), NOSPLIT, $0-48
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ c+24(FP), R9
	MOVQ e+32(FP), R10
	MOVQ n+40(FP), CX
	SHLQ $3, CX
	XORQ AX, AX

loop4:
	CMPQ    AX, CX
	JAE     done4
	VMOVUPD (SI)(AX*1), Y0
	VMOVUPD 32(SI)(AX*1), Y1
	VADDPD  (R8)(AX*1), Y0, Y0
	VADDPD  32(R8)(AX*1), Y1, Y1
	VADDPD  (R9)(AX*1), Y0, Y0
	VADDPD  32(R9)(AX*1), Y1, Y1
	VADDPD  (R10)(AX*1), Y0, Y0
	VADDPD  32(R10)(AX*1), Y1, Y1
	VMOVUPD Y0, (DI)(AX*1)
	VMOVUPD Y1, 32(DI)(AX*1)
	ADDQ    $64, AX
	JMP     loop4

done4:
	VZEROUPPER
	RET
