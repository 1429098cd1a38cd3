// Package broker is the artifact service: it issues single-use upload
// capabilities to live attempts for the artifacts their job declares,
// receives the uploads, and lists and serves a run's stored artifacts.
//
// A capability is only as good as the attempt that obtained it: the upload
// re-checks, in the transaction that records the artifact, that the attempt
// still holds the lease it held when the capability was issued. Those
// checks are the run service's (Runs, which *control.Service satisfies);
// the bytes go to an artifact.Storage.
package broker
