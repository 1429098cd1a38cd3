package artifact

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// ErrNoCredentials: no access key was found where credentials were looked
// for.
var ErrNoCredentials = errors.New("no S3 credentials")

// StaticCredentials signs with one fixed key.
func StaticCredentials(accessKey, secretKey, sessionToken string) aws.CredentialsProvider {
	c := aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secretKey, SessionToken: sessionToken, Source: "jobplane"}
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return c, nil })
}

// ParseCredentialsFile reads one profile of a shared credentials file in
// the format the AWS tools write:
//
//	[default]
//	aws_access_key_id = …
//	aws_secret_access_key = …
//	aws_session_token = …   (optional)
//
// Comments start with # or ;. Unknown keys are ignored, as the AWS tools
// ignore them (the file often carries settings of other tools).
func ParseCredentialsFile(data []byte, profile string) (aws.Credentials, error) {
	if profile == "" {
		profile = "default"
	}
	var c aws.Credentials
	section, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
			continue
		case l[0] == '[':
			if !strings.HasSuffix(l, "]") {
				return c, fmt.Errorf("line %d: section header without ]", line)
			}
			section = strings.TrimSpace(strings.TrimPrefix(l[1:len(l)-1], "profile "))
			found = found || section == profile
			continue
		}
		if section != profile {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return c, fmt.Errorf("line %d: want key = value", line)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "aws_access_key_id":
			c.AccessKeyID = strings.TrimSpace(v)
		case "aws_secret_access_key":
			c.SecretAccessKey = strings.TrimSpace(v)
		case "aws_session_token":
			c.SessionToken = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if !found {
		return c, fmt.Errorf("profile %q: %w", profile, ErrNoCredentials)
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return c, fmt.Errorf("profile %q needs aws_access_key_id and aws_secret_access_key: %w", profile, ErrNoCredentials)
	}
	c.Source = "jobplane credentials file"
	return c, nil
}
