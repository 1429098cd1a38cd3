package store

import (
	"fmt"

	"github.com/jobplane/jobplane/internal/protocol"
)

// RunnerCapabilities reads what a runner states of its executor when it
// registers or beats: the executor's name and what it can do. Absent
// fields are what runners that predate them are: the process executor,
// without isolation or images.
func RunnerCapabilities(executor string, c *protocol.Capabilities) (string, Capabilities, error) {
	if err := protocol.CheckExecutor(executor); err != nil {
		return "", 0, &protocol.FieldError{Field: "executor", Err: fmt.Errorf("%w: %w", err, protocol.ErrBadRequest)}
	}
	if executor == "" {
		executor = ExecutorProcess
	}
	var caps Capabilities
	if c != nil && c.Images {
		caps |= CapImages
	}
	if c != nil && c.Isolated {
		caps |= CapIsolated
	}
	return executor, caps, nil
}

// Protocol is the wire form of c.
func (c Capabilities) Protocol() protocol.Capabilities {
	return protocol.Capabilities{Images: c.Has(CapImages), Isolated: c.Has(CapIsolated)}
}
