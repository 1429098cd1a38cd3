package e2e

// The protected resource of the L4 test: a counter row in a SQLite file
// that jobs increment with a read-modify-write while they hold a run lease,
// fenced by their fencing token the way a downstream system should be.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"
)

// helperMain runs this test binary as a job's client (E2E_HELPER=role).
func helperMain(role string) int {
	var err error
	switch role {
	case "fenced-incr":
		err = fencedIncrement(os.Getenv("E2E_DIR"), os.Getenv("E2E_KEY"), os.Getenv("E2E_MODE") == "fenced")
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 3
	}
	return 0
}

func openCounter(dir string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "counter.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL, fence INTEGER NOT NULL);
		INSERT OR IGNORE INTO counter VALUES (1, 0, 0)`); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// appendLine writes one ledger line with O_APPEND (short lines are whole).
func appendLine(dir, format string, args ...any) error {
	f, err := os.OpenFile(filepath.Join(dir, "ledger"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, format+"\n", args...)
	return err
}

// fencedIncrement increments the counter with a gap between read and write
// (where the test pauses the holder). Fenced, it first raises the row's
// fence to its token, refused if a newer token was seen, and writes only
// while the fence is still its own: a stale holder's write is refused
// whether it comes before or after the newer holder's write. Unfenced, it
// writes blindly, and a paused holder loses the newer holder's update.
func fencedIncrement(dir, key string, fenced bool) error {
	var tokens map[string]int64
	if err := json.Unmarshal([]byte(os.Getenv("JOBPLANE_FENCING_TOKENS")), &tokens); err != nil {
		return fmt.Errorf("JOBPLANE_FENCING_TOKENS: %w", err)
	}
	tok, ok := tokens[key]
	if !ok {
		return fmt.Errorf("no fencing token for %q in %v", key, tokens)
	}
	db, err := openCounter(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	if fenced {
		res, err := db.Exec(`UPDATE counter SET fence = ? WHERE id = 1 AND fence <= ?`, tok, tok)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return appendLine(dir, "fenced %d", tok)
		}
	}
	var v int64
	if err := db.QueryRow(`SELECT value FROM counter WHERE id = 1`).Scan(&v); err != nil {
		return err
	}
	if err := appendLine(dir, "read %d %d", tok, v); err != nil {
		return err
	}
	time.Sleep(time.Second) // the window in which the test stops this process
	q, args := `UPDATE counter SET value = ? WHERE id = 1`, []any{v + 1}
	if fenced {
		q, args = `UPDATE counter SET value = ? WHERE id = 1 AND fence = ?`, []any{v + 1, tok}
	}
	res, err := db.Exec(q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return appendLine(dir, "fenced %d", tok)
	}
	return appendLine(dir, "ack %d %d", tok, v+1)
}
