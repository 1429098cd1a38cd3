// Package yamlpos decodes YAML files by walking their syntax tree, so that
// every problem can be reported with the file, line, column and field path
// where it is written.
//
// Definitions (package catalog) and connector files (package connector) are
// written by people and reviewed in pull requests. A reviewer fixing a file
// wants every mistake at once, each one pointing at its line, rather than the
// first error of an unmarshaller that stops there and knows no positions. So
// the YAML is not unmarshalled into structs: a Decoder walks the tree, each
// typed accessor (Str, Integer, Duration, Object, ...) reports a wrong type,
// an unknown key or an out-of-range value as an Error and lets decoding go
// on, and the caller collects Decoder.Errs at the end.
//
// The input is hostile: anyone who can open a pull request can write it, and
// the server parses it. Every file is held to explicit Limits instead of the
// parser's own:
//
//   - a size cap, checked before parsing;
//   - a byte scan that refuses deep flow nesting ([ and {) and long runs of
//     "- - -" or "? ? ?" on one line, because the parser is quadratic in
//     nesting depth (100,000 nested brackets took over a minute when
//     measured);
//   - a budget of nodes visited while decoding, aliases expanded, which
//     stops alias bombs ("billion laughs"), and a bound on alias hops and on
//     the nesting of decoded values;
//   - YAML tags and merge keys (<<) are refused, so what a file means is
//     what it says;
//   - a panic of the parser is recovered and reported as an error of the
//     file, so one bad file cannot take the server down.
//
// The package imports nothing of jobplane, so that both catalog and
// connector (which catalog imports) can use it.
package yamlpos
