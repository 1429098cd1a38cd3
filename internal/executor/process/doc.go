// Package process is the executor that runs a job as a child process of
// the worker, leader of its own process group, so that a stop reaches
// everything the job started.
package process
