# Drives a real interactive zsh through a pseudo-terminal: sources the
# completion script given as $1, types the line $2 followed by Tab, and
# prints each completion zsh's completion system adds, one per line.
#
#   zsh -f zsh-complete.zsh SCRIPT LINE
#
# The markers are spelled in two pieces in what is typed so that the echo
# of the typed lines is never taken for output.
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "PS1='' PROMPT='' RPROMPT=''; unsetopt zle_bracketed_paste 2>/dev/null"
zpty -w z "source ${(q)1}"
zpty -w z 'bindkey "^I" complete-word; zstyle ":completion:*" list-grouped false; zstyle ":completion:*" insert-tab false'
# The completion system runs these before and after a completion; after
# it, the shell exits, so the reading loop ends.
zpty -w z 'compprefuncs=( _cap_begin ); comppostfuncs=( _cap_end ); _cap_begin() { print -r -- "<<BEG""IN>>" }; _cap_end() { print -r -- "<<E""ND>>"; exit }'
# compadd, wrapped, prints what each completion function adds (asking
# for the matches with -A first), then adds them as usual.
zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a __hits; builtin compadd -A __hits "$@"; print -rl -- "HI""T:"${^__hits}; builtin compadd "$@"; }'
zpty -w -n z "$2"$'\t'
integer started=0
while zpty -r z line; do
  [[ $line == *'<<BEGIN>>'* ]] && { started=1; continue }
  [[ $line == *'<<END>>'* ]] && break
  (( started )) && [[ $line == *HIT:* ]] && print -r -- "${${line##*HIT:}%$'\r'}"
done
zpty -d z
