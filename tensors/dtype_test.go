package tensors

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/testutil"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

// TestHalfRoundingMatchesNumPy compares Float16Bits and BFloat16Bits with
// NumPy's float16 cast and with bfloat16 defined as float32's top 16 bits
// after round-to-nearest-even, on ties, subnormals, overflow and specials.
func TestHalfRoundingMatchesNumPy(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 65504, 65519.99, 65520, 1e6, -1e6, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8,
		1e-9, 1.0009765625, 1.00048828125, 1.000732421875, 1.0001220703125, 3.14159265358979, 17.6875, 17.671875 + 0.0078125,
		math.Inf(1), math.Inf(-1), 0.1, 0.2, 0.3, 1234.5678, -0.000123, 2049, 2051, 4097, 1 + 1.0/2048, 1 + 3.0/2048}
	for i := 0; i < 200; i++ {
		vals = append(vals, math.Ldexp(1+float64(i)/199, i%60-30)*float64(1-2*(i%2)))
	}
	strs := make([]string, len(vals))
	for i, v := range vals {
		strs[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	data, _ := json.Marshal(strs)
	script := `
import json, sys, numpy as np
v = np.array([float(x) for x in json.loads(sys.argv[1])], dtype=np.float64)
f = v.astype(np.float32)
b = f.view(np.uint32).astype(np.uint64)
bf = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
print(json.dumps({"f16": v.astype(np.float16).view(np.uint16).tolist(), "bf16": bf.tolist()}))
`
	out := testutil.Python(t, "-c", script, string(data))
	var want struct{ F16, BF16 []uint16 }
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if got := Float16Bits(v); got != want.F16[i] {
			t.Errorf("Float16Bits(%v) = %#04x, NumPy says %#04x", v, got, want.F16[i])
		}
		if got := BFloat16Bits(float32(v)); got != want.BF16[i] {
			t.Errorf("BFloat16Bits(%v) = %#04x, want %#04x", v, got, want.BF16[i])
		}
	}
	if nan := Float16Bits(math.NaN()); nan&0x7c00 != 0x7c00 || nan&0x3ff == 0 {
		t.Errorf("NaN became %#04x", nan)
	}
}
