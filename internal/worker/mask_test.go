package worker

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jobplane/jobplane/internal/executor"
	"github.com/jobplane/jobplane/internal/protocol"
	"github.com/jobplane/jobplane/internal/redact"
)

// TestMaskBeforeCut: a credential that straddles the executor's 64 KiB
// cut of a long line is masked whole; neither half is shipped.
func TestMaskBeforeCut(t *testing.T) {
	const secret = "ghp_ThisIsTheRunnersSecretValue0123456789"
	for _, off := range []int{1, 10, len(secret) / 2, len(secret) - 1} {
		var mu sync.Mutex
		var lines []protocol.LogLine
		a := &attempt{}
		a.masker.Store(redact.NewMasker(secret))
		a.logs = newShipper(time.Now, time.Hour, func(r protocol.LogsRequest) bool {
			mu.Lock()
			lines = append(lines, r.Lines...)
			mu.Unlock()
			return true
		})
		cutAt := executor.MaxLineBytes - utf8.UTFMax // ReadPieces' first cut
		line := strings.Repeat("a", cutAt-off) + secret + strings.Repeat("b", executor.MaxLineBytes) + "é tail"
		executor.ReadPieces(strings.NewReader(line+"\nnext line\n"), func(p string, more bool) { a.emitPiece("stdout", p, more) })
		a.logs.close()
		mu.Lock()
		var all strings.Builder
		for _, l := range lines {
			require.LessOrEqual(t, len(l.Text), executor.MaxLineBytes)
			require.True(t, utf8.ValidString(l.Text))
			require.NotContains(t, l.Text, secret[:off], "offset %d: the first half leaked", off)
			require.NotContains(t, l.Text, secret[off:], "offset %d: the second half leaked", off)
			all.WriteString(l.Text)
		}
		require.Equal(t, strings.ReplaceAll(line, secret, redact.MaskText)+"next line", all.String())
		require.Equal(t, "next line", lines[len(lines)-1].Text)
		mu.Unlock()
	}
}
