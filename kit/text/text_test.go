package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate_neverSplitsACharacter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 10, "abc"},
		{"abcdef", 2, "ab…"},
		{"aé", 2, "a…"},
		{"a\xffb", 10, "a\uFFFDb"},
		{"日本", 4, "日…"},
		{"abc", 0, "…"},
		{"abc", -1, "…"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add("aé", 2)
	f.Add(strings.Repeat("€", 400), 1021)
	f.Add("a\xff\xfeb", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 4096
		got := Truncate(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q is not valid UTF-8", s, n, got)
		}
		if len(got) > max(n, 0)+len("…") {
			t.Fatalf("Truncate(%q, %d) is %d bytes", s, n, len(got))
		}
	})
}
