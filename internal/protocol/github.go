package protocol

import "net/http"

// Webhook intake codes (POST /v1/github/webhook).
const (
	// CodeWebhookSignatureMissing: no X-Hub-Signature-256 header (the
	// SHA-1 X-Hub-Signature alone is not accepted).
	CodeWebhookSignatureMissing = "webhook_signature_missing"
	// CodeWebhookSignatureInvalid: the signature matches no accepted secret.
	CodeWebhookSignatureInvalid = "webhook_signature_invalid"
	// CodeWebhookDeliveryInvalid: a signed delivery without a usable
	// X-GitHub-Delivery or X-GitHub-Event header, or whose payload is not
	// the event it claims to be.
	CodeWebhookDeliveryInvalid = "webhook_delivery_invalid"
	// CodeInstallationSuspended: the tenant's GitHub App installation is
	// suspended: it may neither request runs nor claim work.
	CodeInstallationSuspended = "installation_suspended"
	// CodeInstallationDeleted: the tenant's GitHub App installation was
	// deleted (uninstalled); the tenant is kept for audit only.
	CodeInstallationDeleted = "installation_deleted"
)

// Webhook intake refusals.
var (
	ErrWebhookSignatureMissing = newErr(http.StatusUnauthorized, CodeWebhookSignatureMissing, "Webhook signature missing")
	ErrWebhookSignatureInvalid = newErr(http.StatusUnauthorized, CodeWebhookSignatureInvalid, "Webhook signature invalid")
	ErrWebhookDeliveryInvalid  = newErr(http.StatusBadRequest, CodeWebhookDeliveryInvalid, "Webhook delivery invalid")
	ErrInstallationSuspended   = newErr(http.StatusForbidden, CodeInstallationSuspended, "GitHub installation suspended")
	ErrInstallationDeleted     = newErr(http.StatusForbidden, CodeInstallationDeleted, "GitHub installation deleted")
)
