// Line input for `zinc chat` on a terminal: libedit (BSD editline) with its emacs keys (cursor movement,
// Ctrl-A/E/K/L, word motion), a history of sent messages kept in a file (up and down arrows, across
// sessions), a bracketed paste taken as one piece of text however many lines it has, and Ctrl-C ending
// the wait with ReadStatus::Interrupted (the partial line discarded).
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "cli/terminal.h"

struct editline;
struct history;

namespace zinc::cli {

class LineEditor {
 public:
  // history_file: read now and rewritten after each entry; empty or unwritable: history for this run only.
  LineEditor(const std::atomic<bool>& interrupted, std::filesystem::path history_file);
  ~LineEditor();
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  // Shows `prompt` (its ANSI styles allowed) and reads one line, without its newline.
  ReadStatus read(const std::string& prompt, std::string& line);
  // Adds a sent message to the history (consecutive repeats kept once).
  void remember(const std::string& entry);

  // The file a model's chat history is kept in: $ZINC_HOME/history/<model file name>.txt.
  static std::filesystem::path history_file_for(const std::string& model_path);

 private:
  static int get_char(editline* el, wchar_t* c);
  static unsigned char paste(editline* el, int key);
  static const char* prompt_of(editline* el);
  int next_byte(bool block);  // from the terminal, or -1 (end of input), -2 (interrupted)

  const std::atomic<bool>& interrupted_;
  std::filesystem::path file_;
  editline* el_ = nullptr;
  history* hist_ = nullptr;
  std::string prompt_;
  std::string pending_;  // bytes read from the terminal and not yet handed to the editor
  bool saw_interrupt_ = false;
};

}  // namespace zinc::cli
