package source

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/internal/gitsync"
)

// BenchmarkArchive measures a source download's server side: verify the
// commit, walk its tree, tar and gzip 500 files of 4 KiB.
func BenchmarkArchive(b *testing.B) {
	dir := b.TempDir()
	files := map[string]string{}
	for i := range 500 {
		files[fmt.Sprintf("pkg%02d/file%03d.go", i%20, i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), 512)
	}
	commit, err := gitsync.InitRepo(dir, "main", files, "bench")
	if err != nil {
		b.Fatal(err)
	}
	br, err := Open(map[string]string{"code": dir}, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	var n countWriter
	for b.Loop() {
		n = 0
		if err := br.Archive(context.Background(), "code", commit, func() io.Writer { return &n }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "gz-bytes")
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
