package api_test

import (
	"bufio"
	"encoding/json"
	"io"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
func jsonUnmarshal(b []byte, v any) error   { return json.Unmarshal(b, v) }
