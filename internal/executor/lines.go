package executor

import (
	"bufio"
	"io"
	"unicode/utf8"
)

// MaxLineBytes caps one output line; longer lines are split.
const MaxLineBytes = 64 << 10

// ReadLines calls emit for each line of r, without its line ending, until r
// ends. A line longer than MaxLineBytes is emitted in pieces, cut on UTF-8
// boundaries.
func ReadLines(r io.Reader, emit func(string)) {
	// The reader's buffer leaves room for a carried partial rune (≤ 3 bytes).
	br := bufio.NewReaderSize(r, MaxLineBytes-utf8.UTFMax)
	var carry []byte
	for {
		frag, isPrefix, err := br.ReadLine()
		if err != nil {
			if len(carry) > 0 {
				emit(string(carry))
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
		emit(string(buf))
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
