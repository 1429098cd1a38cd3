// Package fakegithub is a fake of the parts of GitHub's REST API and
// webhooks that jobplane uses, served by httptest. It is faithful where
// faithfulness is what a test relies on: it verifies the App JWT (RS256
// signature, issuer, iat and exp window), issues installation tokens bound to
// one installation's repositories and permissions, answers 404 for a
// repository outside a token and 403 for a permission beyond it, validates
// Check Run states, serves tarballs that git archive makes from real local
// repositories at exact commits, and signs webhook deliveries as GitHub
// does. It records every request with the installation its token belongs to,
// so tests can prove that two installations never cross.
package fakegithub
