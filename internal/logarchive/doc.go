// Package logarchive keeps the log lines of ended runs in the object store
// (an artifact.Storage, the filesystem or S3 one) instead of the database,
// and reads them back for the logs API.
//
// Each attempt's lines become one object, "JSON lines" compressed as a
// series of independent gzip members (a valid gzip file) of up to
// BlockLines lines each. The database row of the archive (store.LogArchive)
// records where every member starts and which line IDs it holds, so that a
// page of the logs API, which asks for the lines after a cursor, reads one
// ranged GET of a member or two rather than the whole object.
//
// Lines keep their IDs: a cursor handed out while a line was in the
// database names the same line once it is in an object, so a client that
// pages or follows a run across the move neither misses nor repeats one.
// While an attempt's lines are being deleted from the database after its
// object was published, a line may be in both; the Reader returns one copy.
//
// Moving is the retention sweeper's (internal/retention); this package
// writes and reads objects and merges them with the database's lines.
package logarchive
