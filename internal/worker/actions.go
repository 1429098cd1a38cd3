package worker

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/jobplane/jobplane/internal/protocol"
)

// RunAssigned runs one attempt the worker did not claim: the one a GitHub
// Actions workflow received from its exchange, leased to the one-attempt
// runner runnerID whose key is key. sent is when the exchange was sent
// (the lease's trust window starts there, as a claim's does). It renews,
// ships logs and artifacts and reports the result exactly as for a claimed
// attempt, with the same supervision and masking, and returns the outcome
// reported ("" when the attempt could not start).
func (w *Worker) RunAssigned(ctx context.Context, runnerID string, key ed25519.PrivateKey, asg *protocol.Assignment, sent time.Time) string {
	w.rc.RunnerID, w.rc.Key = runnerID, key
	w.log = w.log.With("runner_id", runnerID)
	return w.runAttempt(ctx, asg, sent)
}
