// Package gcfloor keeps a server's garbage collector from running more
// often than its memory needs.
//
// Go's collector, at its default GOGC=100, runs each time the heap has
// grown by as much as it held live after the last run. A control plane's
// live heap is small (tens of megabytes) while it allocates quickly (JSON,
// rows, signatures per call), so it collects many times a second: about a
// sixth of the server's CPU in the benchmark's lifecycle. Start raises GOGC
// while the live heap is small, so that the heap may grow to a floor
// (256 MiB for `jobplane server` by default) before the next collection,
// and lowers it back to 100 as the live heap approaches the floor: memory
// above the floor grows as it would have anyway. An operator's own GOGC
// (the environment variable) is left alone.
package gcfloor
