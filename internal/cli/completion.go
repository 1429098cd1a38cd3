package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

// CompletionCmd prints a shell completion script made from the command
// tree itself, so it never lags behind the commands and flags.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

// Run prints the script.
func (c *CompletionCmd) Run(g *Globals) error {
	var root cliRoot
	parser, err := newParser(&root, io.Discard, io.Discard, func(int) {})
	if err != nil {
		return err
	}
	nodes := completionNodes(parser.Model.Node)
	switch c.Shell {
	case "bash":
		writeBash(g.Stdout, nodes)
	case "zsh":
		// zsh runs the bash function through bashcompinit: one script to
		// keep right instead of two.
		fmt.Fprintln(g.Stdout, "# jobplane completion for zsh: source <(jobplane completion zsh) in ~/.zshrc")
		fmt.Fprintln(g.Stdout, "autoload -U +X compinit && compinit")
		fmt.Fprintln(g.Stdout, "autoload -U +X bashcompinit && bashcompinit")
		writeBash(g.Stdout, nodes)
	case "fish":
		writeFish(g.Stdout, nodes)
	}
	return nil
}

// compNode is one command: its path from the root ("" for the root, "runs
// show"), its subcommands and its flags (with the inherited ones).
type compNode struct {
	path  string
	subs  []string
	help  map[string]string
	flags []*kong.Flag
}

func completionNodes(root *kong.Node) []compNode {
	var out []compNode
	var walk func(n *kong.Node, path string)
	walk = func(n *kong.Node, path string) {
		c := compNode{path: path, help: map[string]string{}}
		for _, group := range n.AllFlags(true) {
			c.flags = append(c.flags, group...)
		}
		for _, ch := range n.Children {
			if ch.Hidden || ch.Type != kong.CommandNode {
				continue
			}
			c.subs = append(c.subs, ch.Name)
			c.help[ch.Name] = ch.Help
		}
		out = append(out, c)
		for _, ch := range n.Children {
			if ch.Hidden || ch.Type != kong.CommandNode {
				continue
			}
			walk(ch, strings.TrimSpace(path+" "+ch.Name))
		}
	}
	walk(root, "")
	sort.SliceStable(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func flagWords(fs []*kong.Flag) []string {
	var w []string
	for _, f := range fs {
		w = append(w, "--"+f.Name)
		if f.Short != 0 {
			w = append(w, "-"+string(f.Short))
		}
	}
	return w
}

func writeBash(w io.Writer, nodes []compNode) {
	fmt.Fprint(w, `# jobplane completion for bash: source <(jobplane completion bash) in ~/.bashrc
_jobplane_subs() {
  case "$1" in
`)
	for _, n := range nodes {
		if len(n.subs) > 0 {
			fmt.Fprintf(w, "    %q) echo %q ;;\n", n.path, strings.Join(n.subs, " "))
		}
	}
	fmt.Fprint(w, `  esac
}
_jobplane_flags() {
  case "$1" in
`)
	for _, n := range nodes {
		fmt.Fprintf(w, "    %q) echo %q ;;\n", n.path, strings.Join(flagWords(n.flags), " "))
	}
	fmt.Fprint(w, `  esac
}
_jobplane() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="" i w s
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    for s in $(_jobplane_subs "$path"); do
      if [[ "$w" == "$s" ]]; then
        path="${path:+$path }$w"
        break
      fi
    done
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_jobplane_flags "$path")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_jobplane_subs "$path")" -- "$cur"))
  fi
}
complete -o default -F _jobplane jobplane
`)
}

func writeFish(w io.Writer, nodes []compNode) {
	fmt.Fprintln(w, "# jobplane completion for fish: jobplane completion fish > ~/.config/fish/completions/jobplane.fish")
	fmt.Fprintln(w, "complete -c jobplane -f")
	for _, n := range nodes {
		cond := fishCondition(n.path, n.subs)
		for _, s := range n.subs {
			fmt.Fprintf(w, "complete -c jobplane -n %s -a %s -d %s\n", fishQuote(cond), fishQuote(s), fishQuote(firstSentence(n.help[s])))
		}
		if n.path == "" {
			continue
		}
		leaf := fishCondition(n.path, nil)
		for _, f := range n.flags {
			line := fmt.Sprintf("complete -c jobplane -n %s -l %s", fishQuote(leaf), f.Name)
			if f.Short != 0 {
				line += " -s " + string(f.Short)
			}
			if !f.IsBool() {
				line += " -r -F"
			}
			fmt.Fprintln(w, line+" -d "+fishQuote(firstSentence(f.Help)))
		}
	}
}

// fishCondition is true when the words typed so far are path and none of
// subs yet.
func fishCondition(path string, subs []string) string {
	var parts []string
	if path == "" {
		parts = append(parts, "__fish_use_subcommand")
	} else {
		for _, p := range strings.Fields(path) {
			parts = append(parts, "__fish_seen_subcommand_from "+p)
		}
	}
	if len(subs) > 0 && path != "" {
		parts = append(parts, "not __fish_seen_subcommand_from "+strings.Join(subs, " "))
	}
	return strings.Join(parts, "; and ")
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
