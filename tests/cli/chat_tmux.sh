#!/usr/bin/env bash
# zinc chat in a real terminal (a private tmux server): the answer streams, Ctrl-C stops it and the
# prompt returns, /reset clears the context, multi-line input, /save, Ctrl-C at the prompt, /exit; line
# editing: history on the up arrow, kept across sessions, a bracketed paste sent as one message, Ctrl-C
# discarding a half-typed line; on stories260K and on a model converted from a transformers fixture.
# Then the same binary with piped input and output: plain text, no terminal styles.
# Usage: chat_tmux.sh ZINC STORIES.gguf FIXTURE_DIR WORKDIR
set -euo pipefail
zinc=$1 stories=$2 fixture=$3 work=$4
if ! command -v tmux >/dev/null; then
  echo "FAIL: tmux is not installed (scripts/deps.sh --test installs it)"
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
export ZINC_HOME="$work/home"  # the chat history files go here, not to the user's
sock="$work/tmux.sock"
T() { tmux -S "$sock" "$@"; }
trap 'tmux -S "$sock" kill-server 2>/dev/null || true' EXIT

session=chat0
pane() { T capture-pane -p -J -t "$session" -S -1000; }
fail() {
  echo "FAIL: $*"
  echo "---- pane ----"
  pane | grep -v '^$' | tail -40
  exit 1
}
wait_for() {  # PATTERN [SECONDS]
  local i=0 limit=$(( ${2:-30} * 10 ))
  until pane | grep -qE -- "$1"; do
    sleep 0.1
    i=$((i + 1))
    [ $i -lt $limit ] || fail "no /$1/ on screen"
  done
}
wait_count() {  # PATTERN N: until the pattern is on at least N lines
  local i=0
  until [ "$(pane | grep -cE -- "$1")" -ge "$2" ]; do
    sleep 0.1
    i=$((i + 1))
    [ $i -lt 300 ] || fail "fewer than $2 lines with /$1/"
  done
}
last_line() { pane | grep -v '^[[:space:]]*$' | tail -1; }
wait_for_prompt() {
  local i=0
  until last_line | grep -qE '^>[[:space:]]*$'; do
    sleep 0.1
    i=$((i + 1))
    [ $i -lt 300 ] || fail "the prompt did not come back"
  done
}
keys() { T send-keys -t "$session" "$@"; }
send() { keys -l "$1"; keys Enter; }
start() {  # a new session (the earlier one, exited, stays until the end)
  session=chat$((${session#chat} + 1))
  T new-session -d -s "$session" -x 150 -y 40 "$(printf '%q ' "$@"); echo \"[exited \$?]\"; sleep 60"
  wait_for_prompt
}

# 1. stories260K, generating without end (the context shifts when full): only Ctrl-C stops it.
start "$zinc" chat -m "$stories" -c 256 --context-shift -n -1 --temp 0
pane | grep -qE "loading \(cpu\) \[#{20}\] 100%  1\.12 MiB / 1\.12 MiB" || fail "no progress line for the model's loading"
pane | grep -qE "^zinc chat · llama · cpu · context 256 tokens" || fail "the header does not name the model and backend"
send "Once upon a time"
wait_for "Lily" 10
before=$(pane | md5sum)
sleep 0.5
[ "$(pane | md5sum)" != "$before" ] || fail "the answer is not streaming"
pane | grep -q "tok/s" && fail "a status line appeared before the answer ended"
keys C-c
wait_for "\[stopped\]" 10
wait_for "tok/s · [0-9]+ tokens · context [0-9]+/256"
wait_for_prompt
echo "ok load progress, streaming, Ctrl-C stops the answer and the prompt returns"

send "/stats"
wait_for "context [1-9][0-9]*/256 tokens · 2 messages · 1 answers"
send "/reset"
wait_for "\(conversation cleared\)"
send "/stats"
wait_for "context 0/256 tokens · 0 messages"
echo "ok /reset clears the context"

# Multi-line input, saved and checked in the file.
keys -l 'first line\'
keys Enter
send "second line"
# Ctrl-C before the program has read the line would make the terminal discard it: wait for the answer.
i=0
until [ "$(pane | sed -n '/^\.\.\. second line/,$p' | grep -cv '^[[:space:]]*$')" -ge 2 ]; do
  sleep 0.1
  i=$((i + 1))
  [ $i -lt 100 ] || fail "no answer to the multi-line message"
done
keys C-c
wait_count "\[stopped\]" 2
wait_for_prompt
send "/save $work/conv.json"
wait_for "saved 2 messages"
grep -q '"content": "first line\\nsecond line"' "$work/conv.json" || fail "multi-line message not kept: $(cat "$work/conv.json")"
echo "ok multi-line input and /save"

keys C-c
wait_for "type /exit or press Ctrl-D"
send "/exit"
wait_for "\[exited 0\]"
echo "ok Ctrl-C at the prompt keeps the program, /exit quits"

# 1a. Line editing. History: the up arrow brings back earlier messages, in this session and the next
# (kept per model under ZINC_HOME); Ctrl-A / Ctrl-E move to the line's ends.
history_file="$ZINC_HOME/history/$(basename "$stories").txt"
# (libedit's file format: one entry per line, spaces and newlines written as \040 and \012)
grep -qF 'first\040line\012second\040line' "$history_file" || fail "the sent messages are not in $history_file: $(cat "$history_file")"
start "$zinc" chat -m "$stories" -n 4 --temp 0
keys Up
wait_for "^> /exit *$"
keys Up
wait_for "^> /save $work/conv.json *$"
keys Up
wait_for "^> first line *$"  # the two-line message comes back whole
wait_for "^second line *$"
keys Down Down C-u
keys -l "middle"
keys C-a
keys -l "start "
keys C-e
keys -l " end"
wait_for "^> start middle end *$"
keys C-u
# Ctrl-C with a half-typed line: the line is dropped, nothing is sent, the prompt comes back empty.
keys -l "not sent"
keys C-c
wait_for "type /exit or press Ctrl-D"
wait_for_prompt
send "/stats"
wait_for "context 0/4096 tokens · 0 messages"
# A bracketed paste of three lines is one message, sent with one Enter.
T set-buffer -b pasted "$(printf 'Once upon a time\nthere was a cat\nand a dog')"
T paste-buffer -p -b pasted -t "$session"
keys Enter
wait_for "4 tokens · context"
wait_for_prompt
send "/save $work/paste.json"
wait_for "saved 2 messages"
grep -q '"content": "Once upon a time\\nthere was a cat\\nand a dog"' "$work/paste.json" ||
  fail "the paste was not one message: $(cat "$work/paste.json")"
send "/exit"
wait_for "\[exited 0\]"
echo "ok line editing: history across sessions, Ctrl-A/E, Ctrl-C drops a half-typed line, a paste is one message"

# 1b. `zinc run MODEL` with no prompt, in a terminal, is a chat (as Ollama's run is).
start "$zinc" run "$stories" -n 8 --temp 0
send "Once upon a time"
wait_for "8 tokens · context"
wait_for_prompt
send "/exit"
wait_for "\[exited 0\]"
echo "ok zinc run MODEL without a prompt opens a chat"

# 2. A model converted from a transformers fixture: a bounded answer, /load, /reset.
"$zinc" --json convert "$fixture" "$work/fixture.gguf" --outtype f16 >/dev/null
start "$zinc" chat -m "$work/fixture.gguf" -n 12 --temp 0 --system "Be brief."
send "hello world"
wait_for "12 tokens · context [0-9]+/4096"
wait_for_prompt
send "/load $work/conv.json"
wait_for "loaded 2 messages"
send "/system"
wait_for "\(no system prompt\)"
send "/reset"
wait_for "\(conversation cleared\)"
send "/stats"
wait_for "context 0/4096 tokens"
send "/exit"
wait_for "\[exited 0\]"
echo "ok fixture model: answer, /load, /system, /reset"

# 3. A template that opens the model's reasoning: the answer is reasoning, shown dimmed, or hidden.
printf '%s' '{%- for m in messages -%}{{ m.role }}: {{ m.content }}
{% endfor -%}{%- if add_generation_prompt -%}assistant: <think>
{% endif -%}' >"$work/think.jinja"
start "$zinc" chat -m "$stories" -n 16 --temp 0 --chat-template "$work/think.jinja"
send "Once upon a time"
wait_for "16 tokens · context"
T capture-pane -p -e -t "$session" | grep -q $'\e\\[2m[A-Za-z]' || fail "the reasoning is not dimmed"
send "/exit"
wait_for "\[exited 0\]"
start "$zinc" chat -m "$stories" -n 16 --temp 0 --chat-template "$work/think.jinja" --hide-thinking
send "Once upon a time"
wait_for "16 tokens · context"
pane | grep -q "(thinking)" || fail "no thinking marker"
[ "$(pane | grep -c "Lily\|Once upon a time")" -le 1 ] || fail "hidden reasoning was printed"
send "/exit"
wait_for "\[exited 0\]"
echo "ok reasoning dimmed, or hidden with --hide-thinking"

# 4. Not a terminal: plain text on stdout, remarks on stderr, no escape sequences.
printf 'Once upon a time\n/stats\n' | "$zinc" chat -m "$stories" -n 20 --temp 0 >"$work/out.txt" 2>"$work/err.txt"
grep -q "[A-Za-z]" "$work/out.txt" || { cat "$work/out.txt"; echo "FAIL: no answer on stdout"; exit 1; }
if grep -q $'\x1b' "$work/out.txt"; then echo "FAIL: escape sequences in piped output"; exit 1; fi
grep -q "tok/s" "$work/err.txt" || { echo "FAIL: no status on stderr"; exit 1; }
grep -q "loading" "$work/err.txt" && { echo "FAIL: a progress line when stderr is not a terminal"; exit 1; }
grep -q "tok/s" "$work/out.txt" && { echo "FAIL: status mixed into stdout"; exit 1; }
echo "ok piped: plain stdout"
