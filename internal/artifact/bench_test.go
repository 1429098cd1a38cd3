package artifact

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkStagePublish measures one upload through the filesystem store:
// stream, hash, publish create-exclusive.
func BenchmarkStagePublish(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			st, err := OpenFS(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			data := bytes.Repeat([]byte("x"), size)
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				i++
				k, _ := Key(tenant, run, attempt, fmt.Sprintf("a%d", i))
				s, err := st.Stage(context.Background(), k, bytes.NewReader(data), int64(size))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Publish(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
