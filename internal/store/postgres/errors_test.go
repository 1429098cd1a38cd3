package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobplane/jobplane/internal/store"
)

func TestInterpretError(t *testing.T) {
	for _, c := range []struct {
		in   error
		want error
	}{
		{pgx.ErrNoRows, store.ErrNotFound},
		{fmt.Errorf("wrapped: %w", pgx.ErrNoRows), store.ErrNotFound},
		{&pgconn.PgError{Code: "23505"}, store.ErrAlreadyExists},
		{&pgconn.ConnectError{}, store.ErrUnavailable},
		{store.ErrCommitUnknown, store.ErrCommitUnknown},
	} {
		if got := interpretError(c.in); !errors.Is(got, c.want) {
			t.Errorf("interpretError(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if interpretError(nil) != nil {
		t.Error("nil must stay nil")
	}
	serial := &pgconn.PgError{Code: "40001"}
	if got := interpretError(serial); !retryable(got) {
		t.Errorf("40001 must stay retryable, got %v", got)
	}
	if !retryable(fmt.Errorf("fn: %w", &pgconn.PgError{Code: "40P01"})) {
		t.Error("40P01 must be retryable")
	}
}
