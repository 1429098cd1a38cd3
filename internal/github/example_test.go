package github_test

import (
	"fmt"
	"time"

	"github.com/jobplane/jobplane/internal/github"
)

// A delivery is checked against the raw body bytes; during a rotation the
// previous secret is accepted until its deadline.
func ExampleWebhookSecrets_Verify() {
	until := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	secrets := github.WebhookSecrets{Current: []byte("new secret"), Previous: []byte("old secret"), PreviousUntil: until}
	body := []byte(`{"zen":"Favor focus over features."}`)
	sig := github.SignWebhook([]byte("old secret"), body)

	fmt.Println(secrets.Verify(body, sig, until.Add(-time.Minute)))
	fmt.Println(secrets.Verify(body, sig, until))
	// Output:
	// <nil>
	// github: webhook signature invalid
}
