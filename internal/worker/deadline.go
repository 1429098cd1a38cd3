package worker

import "time"

// minTTL is the protocol's smallest lease TTL; a smaller or missing TTL is
// read as this, which only makes the worker renew sooner and stop earlier.
const minTTL = 2 * time.Second

// leaseTTL is the assignment's TTL, floored at minTTL.
func leaseTTL(seconds int) time.Duration {
	return max(time.Duration(seconds)*time.Second, minTTL)
}

// trustMargin is what the worker keeps back from a TTL for request latency
// and clock-rate error: max(1 s, TTL/10).
func trustMargin(ttl time.Duration) time.Duration {
	return max(time.Second, ttl/10)
}

// trustUntil is when the worker stops trusting a lease it renewed (or
// claimed) with a request sent at sent: sent + TTL − margin. sent must be
// read before the request goes out, so latency only shortens the window.
func trustUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - trustMargin(ttl))
}

// jobDeadline is the local end of the job's run time, computed like
// trustUntil from the claim's send time, or the zero time when the job has
// no timeout. The server never renews a lease beyond the job's deadline, so
// trusting past it would be trusting past the lease.
func jobDeadline(claimSent time.Time, timeoutSeconds int, ttl time.Duration) time.Time {
	if timeoutSeconds <= 0 {
		return time.Time{}
	}
	return claimSent.Add(time.Duration(timeoutSeconds)*time.Second - trustMargin(ttl))
}

// capAt returns the earlier of t and limit; a zero limit means none.
func capAt(t, limit time.Time) time.Time {
	if !limit.IsZero() && limit.Before(t) {
		return limit
	}
	return t
}

// renewEvery is the renewal cadence: a third of the trust window, not of the
// TTL, because the window is what runs out. At the 2 s minimum TTL the window
// is 1 s, and renewing every TTL/3 (0.67 s) would leave a healthy job only
// 0.33 s from its stop.
func renewEvery(ttl time.Duration) time.Duration {
	return (ttl - trustMargin(ttl)) / 3
}

// stopGrace is the SIGTERM → SIGKILL grace before a deadline: at most
// killGrace, and at most a fifth of the trust window, so that a healthy
// renewal cadence (every third of the window) never comes close to
// triggering it.
func stopGrace(killGrace, ttl time.Duration) time.Duration {
	return min(killGrace, (ttl-trustMargin(ttl))/5)
}
