package protocol

// Headers of a signed runner request.
const (
	HeaderRunner    = "Jobplane-Runner"
	HeaderTimestamp = "Jobplane-Timestamp"
	HeaderNonce     = "Jobplane-Nonce"
	HeaderRun       = "Jobplane-Run"
	HeaderAttempt   = "Jobplane-Attempt"
	HeaderLease     = "Jobplane-Lease"
	HeaderSignature = "Jobplane-Signature"
)

// MaxBodyBytes is the largest request body the server reads (uploads aside).
const MaxBodyBytes = 1 << 20

// Environment variables a job's process receives.
const (
	EnvAPI           = "JOBPLANE_API"
	EnvRunID         = "JOBPLANE_RUN_ID"
	EnvAttemptID     = "JOBPLANE_ATTEMPT_ID"
	EnvJob           = "JOBPLANE_JOB"
	EnvChannel       = "JOBPLANE_CHANNEL"
	EnvCommit        = "JOBPLANE_COMMIT"
	EnvRunToken      = "JOBPLANE_RUN_TOKEN"
	EnvParamsFile    = "JOBPLANE_PARAMS_FILE"
	EnvParamPrefix   = "JOBPLANE_PARAM_"
	EnvFencingTokens = "JOBPLANE_FENCING_TOKENS"
	EnvArtifactsDir  = "JOBPLANE_ARTIFACTS_DIR"
)

// ParamEnvName is the environment variable that carries parameter name:
// upper-cased, every character other than A–Z and 0–9 turned into '_'.
func ParamEnvName(name string) string {
	b := []byte(name)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return EnvParamPrefix + string(b)
}
