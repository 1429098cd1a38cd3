// Package storetest is the one conformance suite every store.Store must pass.
//
// The services depend on the documented semantics of the store interface, not
// on a backend, so both backends run exactly these tests (from their own
// packages' tests). Time-dependent cases pass fixed Now values instead of
// sleeping; the concurrency cases (claims, registration tokens, row locks) are
// the ones a backend is most likely to get subtly wrong.
package storetest
