// Package artifact names and stores the files a job's attempt uploads.
//
// A stored artifact lives under a key "tenant/run/attempt/name" built by Key
// from validated segments only, so no client-chosen byte ever reaches a path
// unchecked. Storage is an interface so that an S3-compatible object store
// can replace the filesystem one; FS keeps every object under one directory
// opened as an os.Root, so even a bug in the name checks cannot escape it.
//
// Uploads are staged: bytes stream into a temporary object while their
// SHA-256 is computed and their size bounded, and only a Publish makes the
// object visible under its key. A refused upload is discarded, and a crash
// leaves at most temporaries, which Open removes.
package artifact
