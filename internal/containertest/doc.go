// Package containertest gives tests a real container engine: Podman's
// Docker-compatible service (`podman --runtime runc system service`) on a
// unix socket of the test's own, images built locally from Debian's
// busybox-static (there is no registry), and a statically linked
// supervisor binary to mount into containers.
//
// A test without podman, runc or busybox skips, unless
// JOBPLANE_TEST_REQUIRE_PODMAN=1 makes that a failure (as .ci/run does).
// Podman runs with runc because crun refuses cgroups in hybrid mode on these
// machines, and containers need nofile and nproc limits of 1024:1024
// (Ulimits) because Podman's defaults exceed the hosts' hard limits.
package containertest
