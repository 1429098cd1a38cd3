// Package jobfiles handles the files of an attempt the same way wherever
// the job runs: the worker on its host, and the supervisor inside a
// Kubernetes pod. Unpack extracts a source archive through an os.Root;
// CheckArtifact and Hash look at a declared artifact without following
// what the job may have planted.
package jobfiles
