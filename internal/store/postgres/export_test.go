package postgres

import "context"

// TerminateListener kills the backend of the store's LISTEN connection, as a
// database restart or a network cut would.
func TerminateListener(ctx context.Context, s *Store) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query LIKE 'LISTEN %' || $1 || '%') t`, s.channel).Scan(&n)
	return n, err
}
