package broker

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// errBadDSN never carries the DSN or the parser's message: both can contain
// the admin password.
var errBadDSN = errors.New("not a valid PostgreSQL connection string")

// jobDSN returns admin with the user and password replaced by the minted
// role's, keeping everything else (hosts, port, database, sslmode and other
// parameters) so the job reaches the same server the same way. Both URL and
// keyword/value forms are handled; any password or passfile setting of the
// admin DSN is removed, never passed on.
func jobDSN(admin, user, password string) (string, error) {
	var out string
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			return "", errBadDSN
		}
		u.User = url.UserPassword(user, password)
		q := u.Query()
		for _, k := range []string{"user", "password", "passfile"} {
			q.Del(k)
		}
		u.RawQuery = q.Encode()
		out = u.String()
	} else {
		kv, err := parseKeywordValue(admin)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range kv {
			switch p[0] {
			case "user", "password", "passfile":
				continue
			}
			writeKV(&b, p[0], p[1])
		}
		writeKV(&b, "user", user)
		writeKV(&b, "password", password)
		out = b.String()
	}
	// Check the result means what we intend before a job ever sees it.
	cfg, err := pgx.ParseConfig(out)
	if err != nil || cfg.User != user || cfg.Password != password {
		return "", errBadDSN
	}
	return out, nil
}

func writeKV(b *strings.Builder, k, v string) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(k)
	b.WriteString("='")
	b.WriteString(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v))
	b.WriteByte('\'')
}

// parseKeywordValue splits a libpq keyword/value connection string
// ("host=h dbname='my db'") into ordered pairs, following libpq's quoting
// rules (single quotes, backslash escapes).
func parseKeywordValue(s string) ([][2]string, error) {
	var out [][2]string
	i := 0
	skip := func() {
		for i < len(s) && unicode.IsSpace(rune(s[i])) {
			i++
		}
	}
	for {
		skip()
		if i >= len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && !unicode.IsSpace(rune(s[i])) {
			i++
		}
		key := s[start:i]
		skip()
		if key == "" || i >= len(s) || s[i] != '=' {
			return nil, errBadDSN
		}
		i++
		skip()
		var v strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i >= len(s) {
					return nil, errBadDSN
				}
				c := s[i]
				i++
				if c == '\\' {
					if i >= len(s) {
						return nil, errBadDSN
					}
					v.WriteByte(s[i])
					i++
					continue
				}
				if c == '\'' {
					break
				}
				v.WriteByte(c)
			}
		} else {
			for i < len(s) && !unicode.IsSpace(rune(s[i])) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		out = append(out, [2]string{key, v.String()})
	}
}

// newPassword returns 32 random bytes in base64url without padding: 43
// characters from [A-Za-z0-9_-], which is what lets it sit in a DSN and be
// derived into a SQL literal without any escaping.
func newPassword() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (aborts instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

const scramIterations = 4096 // PostgreSQL's default scram_iterations

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password ("SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>", RFC 5803
// / PostgreSQL's pg_authid format). Sending the verifier instead of the
// password means the plaintext never reaches the server: not its statement
// log, not pg_stat_statements, not an error report quoting the statement.
// The server recognises the format and stores it as is. The password is
// ASCII, so SASLprep leaves it unchanged.
func scramVerifier(password string) string {
	var salt [16]byte
	_, _ = rand.Read(salt[:])
	return scramVerifierWith(password, salt[:], scramIterations)
}

func scramVerifierWith(password string, salt []byte, iter int) string {
	storedKey, serverKey := scramKeys(password, salt, iter)
	enc := base64.StdEncoding
	return "SCRAM-SHA-256$" + strconv.Itoa(iter) + ":" + enc.EncodeToString(salt) + "$" +
		enc.EncodeToString(storedKey) + ":" + enc.EncodeToString(serverKey)
}

func scramKeys(password string, salt []byte, iter int) (storedKey, serverKey []byte) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		panic(err) // only for parameters FIPS mode forbids; ours are fixed and valid
	}
	clientKey := hmacSHA256(salted, "Client Key")
	sk := sha256.Sum256(clientKey)
	return sk[:], hmacSHA256(salted, "Server Key")
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}
