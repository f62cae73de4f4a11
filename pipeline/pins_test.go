package pipeline

import (
	"testing"

	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
)

// TestCheckPins: an object is its pin when path, size and ETag match and,
// without an ETag (a local file), the modification time too; with one, a
// time a second off (a listing's against a HEAD's) is the same upload.
func TestCheckPins(t *testing.T) {
	pin := manifests.Input{Path: "s3://b/in/a.parquet", Bytes: 100, ETag: `"abc"`, MTime: "2026-12-05T14:24:26Z"}
	local := manifests.Input{Path: "in/a.parquet", Bytes: 100, MTime: "2026-12-05T14:24:26Z"}
	for _, c := range []struct {
		name string
		obj  storage.Object
		pin  manifests.Input
		ok   bool
	}{
		{"the same", storage.Object{URL: pin.Path, Size: 100, ETag: `"abc"`, MTime: pin.MTime}, pin, true},
		{"ETag kept, time a second off", storage.Object{URL: pin.Path, Size: 100, ETag: `"abc"`, MTime: "2026-12-05T14:24:25Z"}, pin, true},
		{"ETag changed", storage.Object{URL: pin.Path, Size: 100, ETag: `"abd"`, MTime: pin.MTime}, pin, false},
		{"size changed", storage.Object{URL: pin.Path, Size: 101, ETag: `"abc"`, MTime: pin.MTime}, pin, false},
		{"local, the same", storage.Object{URL: local.Path, Size: 100, MTime: local.MTime}, local, true},
		{"local, touched", storage.Object{URL: local.Path, Size: 100, MTime: "2026-12-05T14:24:27Z"}, local, false},
		{"another path", storage.Object{URL: "in/b.parquet", Size: 100, MTime: local.MTime}, local, false},
	} {
		err := checkPins([]storage.Object{c.obj}, []manifests.Input{c.pin})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
