package chartrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// maxEntries bounds the files of one chart archive.
const maxEntries = 10000

// CheckArchive reads every entry of a chart .tgz and refuses a path that
// is absolute or climbs out ("../"), a symlink, hard link or other special
// file, more than maxEntries entries, or more than maxUnpacked bytes
// unpacked (streamed: a gzip bomb stops at the bound).
func CheckArchive(tgz []byte, maxUnpacked int64) error {
	if maxUnpacked <= 0 {
		maxUnpacked = DefaultMaxUnpacked
	}
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("%w: not gzip: %v", ErrUnsafeArchive, err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
		}
		if n >= maxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrUnsafeArchive, maxEntries)
		}
		name := strings.ReplaceAll(h.Name, "\\", "/")
		if strings.HasPrefix(name, "/") || name != path.Clean(name) && path.Clean(name)+"/" != name || path.Clean(name) == ".." || strings.HasPrefix(path.Clean(name), "../") {
			return fmt.Errorf("%w: entry %q leaves the chart", ErrUnsafeArchive, h.Name)
		}
		for _, part := range strings.Split(name, "/") {
			if part == ".." {
				return fmt.Errorf("%w: entry %q leaves the chart", ErrUnsafeArchive, h.Name)
			}
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeXGlobalHeader, tar.TypeXHeader:
		case tar.TypeSymlink, tar.TypeLink:
			return fmt.Errorf("%w: entry %q is a link", ErrUnsafeArchive, h.Name)
		default:
			return fmt.Errorf("%w: entry %q is not a regular file", ErrUnsafeArchive, h.Name)
		}
		w, err := io.Copy(io.Discard, io.LimitReader(tr, maxUnpacked-total+1))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnsafeArchive, err)
		}
		if total += w; total > maxUnpacked {
			return fmt.Errorf("%w: unpacked, the chart is %w of %d bytes", ErrUnsafeArchive, ErrTooLarge, maxUnpacked)
		}
	}
}

// Load checks a chart archive (CheckArchive) and loads it with Helm's
// loader.
func Load(tgz []byte, maxUnpacked int64) (*chart.Chart, error) {
	if err := CheckArchive(tgz, maxUnpacked); err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("load chart: %v", err)
	}
	return ch, nil
}
