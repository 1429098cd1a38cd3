package supervise

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadControl: any byte stream on the control descriptor yields only
// well-formed controls (a known verb, a non-negative count) and ends with
// the end-of-stream control; it never panics.
func FuzzReadControl(f *testing.F) {
	for _, s := range []string{"until 1500\nstop 0\n", "until -1\n", "stop 99999999999999999999\n", "until\n", "nonsense 5\n", "until 5 6\n", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := make(chan control, len(in)+2)
		readControl(strings.NewReader(in), out)
		close(out)
		var got []control
		for c := range out {
			got = append(got, c)
		}
		if len(got) == 0 || got[len(got)-1] != (control{}) {
			t.Fatalf("the stream's end is not reported: %v", got)
		}
		for _, c := range got[:len(got)-1] {
			if (c.verb != "until" && c.verb != "stop") || c.ms < 0 {
				t.Fatalf("malformed control passed on: %+v", c)
			}
		}
	})
}

// FuzzEnvFile: every entry passed to the job has a name and '=', and no
// entry holds a NUL; a file that cannot be parsed is refused, not half
// used.
func FuzzEnvFile(f *testing.F) {
	for _, s := range []string{"A=1\x00B=2\x00", "A=1", "novalue\x00", "\x00\x00", "=x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p := filepath.Join(t.TempDir(), "env")
		if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		env, err := readEnvFile(p)
		if _, statErr := os.Stat(p); !os.IsNotExist(statErr) {
			t.Fatal("the env file was left behind")
		}
		if err != nil {
			return
		}
		for _, kv := range env {
			if strings.Index(kv, "=") < 1 || strings.Contains(kv, "\x00") {
				t.Fatalf("bad entry %q", kv)
			}
		}
	})
}

// FuzzReadSetup: a setup that is accepted yields well-formed entries and a
// non-negative bound; nothing panics, and a long line is refused.
func FuzzReadSetup(f *testing.F) {
	for _, s := range []string{"env [\"A=1\"]\nuntil 5\n", "until 0\n", "env [\"=x\"]\nuntil 1\n", "env null\nuntil 1\n", "until\n", "env [\nuntil 1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		env, ms, err := readSetup(bufio.NewReader(strings.NewReader(in)))
		if err != nil {
			return
		}
		if ms < 0 {
			t.Fatalf("negative bound %d", ms)
		}
		for _, kv := range env {
			if strings.Index(kv, "=") < 1 || strings.Contains(kv, "\x00") {
				t.Fatalf("bad entry %q", kv)
			}
		}
	})
}
