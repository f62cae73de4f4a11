package tensors

import (
	"os"
	"testing"

	"github.com/relayout/relayout/internal/arrowmem"
)

// TestMain runs the tests with arrow's buffers recycled and poisoned when
// freed (internal/arrowmem), so that a slice used after its array's last
// Release shows as wrong data.
func TestMain(m *testing.M) {
	arrowmem.InstallForTests()
	os.Exit(m.Run())
}
