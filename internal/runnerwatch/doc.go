// Package runnerwatch is runners' availability as a queued run sees it:
// which online runner could take an attempt, the words for why none can
// (Wait), and what one server knows of runners coming online and falling
// silent (Watch), so that a queued run's explanation, and its GitHub Check
// Run, follow runners that come and go. It is pure: the run service feeds
// it the runners it reads and the calls it hears.
package runnerwatch
