package postgres

import "context"

// appliedMigrations lists the migrations already applied, without taking
// the migration lock or creating anything. A server that runs as a role
// without CREATE on the schema (docs/operations.md, "Database roles") then
// starts as long as the owner applied every migration it knows.
func (s *Store) appliedMigrations(ctx context.Context) (map[int]bool, error) {
	done := map[int]bool{}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return done, err
	}
	rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		done[v] = true
	}
	return done, rows.Err()
}
