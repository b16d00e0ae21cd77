#include "cli/line_editor.h"

#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <system_error>

#include "core/knobs.h"

namespace zinc::cli {

namespace {

LineEditor* self(EditLine* el) {
  void* p = nullptr;
  el_get(el, EL_CLIENTDATA, &p);
  return static_cast<LineEditor*>(p);
}

constexpr char kPasteStart[] = "\x1b[200~";
constexpr char kPasteEnd[] = "\x1b[201~";

}  // namespace

std::filesystem::path LineEditor::history_file_for(const std::string& model_path) {
  return std::filesystem::path(zinc_home()) / "history" / (std::filesystem::path(model_path).filename().string() + ".txt");
}

LineEditor::LineEditor(const std::atomic<bool>& interrupted, std::filesystem::path history_file)
    : interrupted_(interrupted), file_(std::move(history_file)) {
  // Wide characters (UTF-8 text) need a UTF-8 character type; the C locale has none.
  std::setlocale(LC_CTYPE, "");
  if (MB_CUR_MAX == 1) std::setlocale(LC_CTYPE, "C.UTF-8");
  el_ = el_init("zinc", stdin, stdout, stderr);
  hist_ = history_init();
  HistEvent ev;
  history(hist_, &ev, H_SETSIZE, 1000);
  history(hist_, &ev, H_SETUNIQUE, 1);
  if (!file_.empty()) history(hist_, &ev, H_LOAD, file_.c_str());
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_HIST, history, hist_);
  el_set(el_, EL_PROMPT_ESC, &LineEditor::prompt_of, '\1');
  el_set(el_, EL_GETCFN, &LineEditor::get_char);
  el_set(el_, EL_ADDFN, "zinc-paste", "Insert a bracketed paste as it is", &LineEditor::paste);
  el_set(el_, EL_BIND, kPasteStart, "zinc-paste", nullptr);
}

LineEditor::~LineEditor() {
  el_end(el_);
  history_end(hist_);
}

const char* LineEditor::prompt_of(EditLine* el) { return self(el)->prompt_.c_str(); }

int LineEditor::next_byte(bool block) {
  while (pending_.empty()) {
    if (!block) return -1;
    char chunk[4096];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n > 0) {
      pending_.append(chunk, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      if (interrupted_.load()) return -2;
    } else {
      return -1;
    }
  }
  const auto b = static_cast<unsigned char>(pending_.front());
  pending_.erase(0, 1);
  return b;
}

// libedit's character source: UTF-8 decoded from the terminal's bytes; -1 ends el_gets (Ctrl-C).
int LineEditor::get_char(EditLine* el, wchar_t* c) {
  LineEditor* ed = self(el);
  std::mbstate_t state{};
  for (;;) {
    const int b = ed->next_byte(true);
    if (b == -2) {
      ed->saw_interrupt_ = true;
      errno = EINTR;
      return -1;
    }
    if (b < 0) return 0;
    const char ch = static_cast<char>(b);
    const size_t r = std::mbrtowc(c, &ch, 1, &state);
    if (r == static_cast<size_t>(-2)) continue;  // a multi-byte character goes on
    if (r == static_cast<size_t>(-1)) {           // not UTF-8: the byte as it is
      *c = static_cast<wchar_t>(b);
      return 1;
    }
    return 1;
  }
}

// Bound to the start of a bracketed paste: everything up to its end marker goes into the line as it
// is, newlines included, so a pasted block is one message.
unsigned char LineEditor::paste(EditLine* el, int) {
  LineEditor* ed = self(el);
  std::string text;
  const std::string end = kPasteEnd;
  for (;;) {
    const int b = ed->next_byte(true);
    if (b < 0) break;
    text.push_back(static_cast<char>(b));
    if (text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0) {
      text.resize(text.size() - end.size());
      break;
    }
  }
  for (char& ch : text) {
    if (ch == '\r') ch = '\n';
  }
  el_insertstr(el, text.c_str());
  return CC_REFRESH;
}

ReadStatus LineEditor::read(const std::string& prompt, std::string& line) {
  prompt_ = prompt;
  saw_interrupt_ = false;
  std::fputs("\x1b[?2004h", stdout);  // bracketed paste on while editing
  std::fflush(stdout);
  int count = 0;
  const char* got = el_gets(el_, &count);
  std::fputs("\x1b[?2004l", stdout);
  std::fflush(stdout);
  if (saw_interrupt_ || (got == nullptr && interrupted_.load())) {
    el_reset(el_);
    pending_.clear();
    return ReadStatus::Interrupted;
  }
  if (got == nullptr || count <= 0) return ReadStatus::End;
  line.assign(got, static_cast<size_t>(count));
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return ReadStatus::Line;
}

void LineEditor::remember(const std::string& entry) {
  if (entry.find_first_not_of(" \t\n") == std::string::npos) return;
  HistEvent ev;
  history(hist_, &ev, H_ENTER, entry.c_str());
  if (file_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  if (!ec) history(hist_, &ev, H_SAVE, file_.c_str());
}

}  // namespace zinc::cli
