package report

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relayout/relayout/manifests"
)

// TestKeyLabelCutsBetweenRunes: the page's chart labels are cut to 40
// characters; a value of multi-byte characters is cut between runes, so
// the page stays valid UTF-8 (a cut at byte 39 split a character).
func TestKeyLabelCutsBetweenRunes(t *testing.T) {
	k := manifests.KeyValues{{Name: "city", Value: strings.Repeat("ü", 50)}}
	got := keyLabel(k)
	if !utf8.ValidString(got) {
		t.Fatalf("label %q is not valid UTF-8", got)
	}
	if n := utf8.RuneCountInString(got); n != 40 || !strings.HasSuffix(got, "…") {
		t.Errorf("label %q: %d runes, want 40 ending in …", got, n)
	}
	if got := keyLabel(manifests.KeyValues{{Name: "c", Value: "US"}}); got != "c=US" {
		t.Errorf("short label %q, want c=US", got)
	}
}
