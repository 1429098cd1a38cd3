package executor

import (
	"bufio"
	"io"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxLineBytes caps one output line; longer lines are split.
const MaxLineBytes = 64 << 10

// ReadLines calls emit for each line of r, without its line ending, until r
// ends. A line longer than MaxLineBytes is emitted in pieces, cut on UTF-8
// boundaries.
func ReadLines(r io.Reader, emit func(string)) {
	ReadPieces(r, func(s string, _ bool) { emit(s) })
}

// ReadPieces is ReadLines that says of each piece whether more of the same
// line follows (more), so that a reader can treat a long line as one (mask
// a credential that straddles a cut, say).
func ReadPieces(r io.Reader, emit func(piece string, more bool)) {
	// The reader's buffer leaves room for a carried partial rune (≤ 3 bytes).
	br := bufio.NewReaderSize(r, MaxLineBytes-utf8.UTFMax)
	var carry []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			if len(carry) > 0 {
				emit(string(carry), false)
			}
			return
		}
		buf := append(carry, frag...)
		carry = nil
		if isPrefix {
			cut := runeBoundary(buf)
			carry = append([]byte(nil), buf[cut:]...)
			buf = buf[:cut]
		}
		emit(string(buf), isPrefix)
	}
}

// runeBoundary returns the length of b without a trailing incomplete rune.
func runeBoundary(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// OutputDrain bounds the wait for a job's output once its processes are
// gone (see DrainOutput).
const OutputDrain = 2 * time.Second

// DrainOutput waits for readers (the goroutines reading a job's output) to
// reach the end of it, for at most within: a process outside the job that
// inherited its output may hold it open. Then it calls closeOutput, which
// must end the readers, and waits for them.
func DrainOutput(readers *sync.WaitGroup, within time.Duration, closeOutput func()) {
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	t := time.NewTimer(within)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	closeOutput()
	<-drained
}
