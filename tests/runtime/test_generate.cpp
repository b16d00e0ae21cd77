// The generation loop and multi-turn chat on real weights (stories260K): every way generation ends,
// context shifting (checked against evaluating the shifted context from scratch), prefix reuse between
// chat turns (asserted on the session's counters) and the context-limit policy.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"
#include "raw_gguf.h"
#include "runtime/chat_session.h"
#include "runtime/generate.h"

namespace zinc::runtime {
namespace {

struct Stories {
  gguf::File file = gguf::File::open(test::testdata_dir() / "models/stories260K.gguf");
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_gguf(file);
  std::unique_ptr<backend::Backend> backend = backend::make_cpu_backend();

  std::unique_ptr<Session> session(int32_t n_ctx) {
    backend::ExecOptions opts;
    opts.n_ctx = n_ctx;
    opts.max_tokens = 64;
    opts.kv_type = backend::KvType::F32;
    return std::make_unique<Session>(file, *backend, opts);
  }
};

sample::Sampler greedy() { return sample::Sampler(sample::SamplerParams::greedy()); }

TEST(Generate, GreedyTakesTheBackendsArgmaxAndAgreesWithTheSampler) {
  // Plain greedy needs no logits (the backend's argmax decides; a GPU reads back one id); a bias,
  // penalties, DRY or sampling do. The two paths choose the same tokens.
  EXPECT_FALSE(greedy().needs_logits());
  auto biased = sample::SamplerParams::greedy();
  biased.logit_bias = {{5, 0.0f}};
  EXPECT_TRUE(sample::Sampler(biased).needs_logits());
  auto penalised = sample::SamplerParams::greedy();
  penalised.repeat_penalty = 1.1f;
  EXPECT_TRUE(sample::Sampler(penalised).needs_logits());
  EXPECT_TRUE(sample::Sampler(sample::SamplerParams::chat()).needs_logits());
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  GenerateOptions o;
  o.max_tokens = 64;
  auto a = m.session(256), b = m.session(256);
  auto plain = greedy();
  sample::Sampler through_logits(biased);  // a zero bias: greedy, but through the sampler's chain
  const auto by_argmax = generate(*a, m.tok, plain, prompt, o, nullptr);
  const auto by_sampler = generate(*b, m.tok, through_logits, prompt, o, nullptr);
  EXPECT_EQ(by_argmax.tokens, by_sampler.tokens);
  EXPECT_EQ(by_argmax.tokens.size(), 64u);
}

TEST(Generate, EndsAtTheTokenLimitAStopStringOrACancel) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  auto s = m.session(256);
  auto sampler = greedy();
  GenerateOptions o;
  o.max_tokens = 12;
  o.decode.at_start = false;
  std::string streamed;
  const auto r = generate(*s, m.tok, sampler, prompt, o, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(r.reason, StopReason::Length);
  EXPECT_EQ(r.tokens.size(), 12u);
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.text.rfind(", there was a little girl", 0), 0u) << r.text;  // the published greedy text
  EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_GT(r.first_token_s, 0.0);
  EXPECT_GE(r.decode_s, 0.0);

  // The same prompt again: everything but its last token is reused from the context.
  o.stop = {"girl"};
  auto sampler2 = greedy();
  const auto stopped = generate(*s, m.tok, sampler2, prompt, o, nullptr);
  EXPECT_EQ(stopped.reason, StopReason::StopString);
  EXPECT_EQ(stopped.stop_index, 0);
  EXPECT_EQ(stopped.text, ", there was a little ");
  EXPECT_EQ(stopped.cached_tokens, static_cast<int64_t>(prompt.size()) - 1);

  std::atomic<bool> cancel{true};
  o.stop.clear();
  o.cancel = &cancel;
  const auto cancelled = generate(*s, m.tok, sampler2, prompt, o, nullptr);
  EXPECT_EQ(cancelled.reason, StopReason::Cancelled);
  EXPECT_TRUE(cancelled.tokens.empty());
}

TEST(Generate, LogprobsAreTheModelsLogSoftmax) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  auto s = m.session(64);
  auto sampler = greedy();
  GenerateOptions o;
  o.max_tokens = 3;
  o.top_logprobs = 4;
  const auto r = generate(*s, m.tok, sampler, prompt, o, nullptr);
  ASSERT_EQ(r.logprobs.size(), 3u);
  // The first token's distribution, recomputed here from the prompt's logits in double precision.
  auto fresh = m.session(64);
  const auto logits = fresh->eval(prompt);
  double mx = -1e30, sum = 0;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const auto& first = r.logprobs[0];
  EXPECT_EQ(first.chosen.token, r.tokens[0]);
  // The engine subtracts the max in float (one rounding of each |v - max|, inside exp: a relative error
  // of the sum no larger than u times the largest), sums and logs in double, and rounds the log
  // probability to float once: u (|logprob| + the logits' range), u = 2^-24, plus double's own.
  const double want = static_cast<double>(logits[static_cast<size_t>(r.tokens[0])]) - mx - std::log(sum);
  const double range = mx - static_cast<double>(*std::min_element(logits.begin(), logits.end()));
  const double tol = 0x1p-24 * (std::fabs(want) + range) + 1e-12;
  EXPECT_NEAR(first.chosen.logprob, want, tol);
  for (const auto& lp : r.logprobs) {
    ASSERT_EQ(lp.top.size(), 4u);
    EXPECT_EQ(lp.top[0].token, lp.chosen.token);  // greedy picks the most likely
    for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_LE(lp.top[i].logprob, lp.top[i - 1].logprob);
  }
  // The first step's top probabilities (each log probability within tol) add up to at most 1.
  double mass = 0;
  for (const auto& t : first.top) mass += std::exp(static_cast<double>(t.logprob));
  EXPECT_LE(mass, 1.0 + 2 * tol);
}

TEST(Generate, ACancelDuringALongPromptStopsBetweenChunks) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  std::vector<int32_t> prompt = m.tok.encode("Once upon a time", true, false);
  while (prompt.size() < 150) prompt.push_back(prompt.back());  // three chunks of at most 64
  auto s = m.session(256);
  auto sampler = greedy();
  std::atomic<bool> cancel{true};
  GenerateOptions o;
  o.cancel = &cancel;
  const auto r = generate(*s, m.tok, sampler, prompt, o, nullptr);
  EXPECT_EQ(r.reason, StopReason::Cancelled);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(s->n_past(), 64);  // the first chunk always runs; the context holds exactly what ran
  EXPECT_EQ(s->history(), std::vector<int32_t>(prompt.begin(), prompt.begin() + 64));
}

TEST(Generate, AFullContextStopsOrShifts) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  auto s = m.session(48);
  auto sampler = greedy();
  GenerateOptions o;
  o.max_tokens = -1;
  const auto full = generate(*s, m.tok, sampler, prompt, o, nullptr);
  EXPECT_EQ(full.reason, StopReason::ContextFull);
  EXPECT_EQ(s->n_past(), 48);
  EXPECT_EQ(full.tokens.size(), 48u - prompt.size() + 1);  // the last token is sampled, not evaluated

  // With shifting, generation goes past the context size, keeping the first 5 tokens.
  auto s2 = m.session(48);
  auto sampler2 = greedy();
  o.max_tokens = 100;
  o.context_shift = true;
  o.n_keep = 5;
  const auto shifted = generate(*s2, m.tok, sampler2, prompt, o, nullptr);
  EXPECT_EQ(shifted.reason, StopReason::Length);
  EXPECT_EQ(shifted.tokens.size(), 100u);
  EXPECT_GE(shifted.context_shifts, 2);
  EXPECT_LE(s2->n_past(), 48);
  // The context is the first 5 tokens and then the most recent ones, in order.
  const auto& h = s2->history();
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), h.begin()));
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), shifted.tokens.begin(), shifted.tokens.end() - 1);
  EXPECT_TRUE(std::equal(h.begin() + 5, h.end(), all.end() - static_cast<std::ptrdiff_t>(h.size() - 5)));
}

// Greedy generation with a reasoning budget, against the same generation without one: the budget only
// changes what happens once reasoning has spent it.
struct BudgetRun {
  GenerateResult free, limited;
  std::vector<int32_t> conclusion;  // the conclusion's tokens
};

BudgetRun run_budget(Stories& m, ReasoningBudget budget, int32_t max_tokens) {
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.decode.at_start = false;
  BudgetRun out;
  auto a = m.session(256), b = m.session(256);
  auto s1 = greedy(), s2 = greedy();
  out.free = generate(*a, m.tok, s1, prompt, o, nullptr);
  o.reasoning = budget;
  std::string streamed;
  out.limited = generate(*b, m.tok, s2, prompt, o, [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(streamed, out.limited.text);
  out.conclusion = m.tok.encode_continuation(budget.conclusion);
  return out;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(std::min(to, v.size()))};
}

// How many of `ids` it takes for their text to contain `marker`.
int32_t tokens_through(const Stories& m, const std::vector<int32_t>& ids, std::string_view marker) {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    text += m.tok.token_to_piece(ids[i]);
    if (text.find(marker) != std::string::npos) return static_cast<int32_t>(i + 1);
  }
  return -1;
}

TEST(Generate, AReasoningBudgetWritesTheConclusionThenTheModelAnswers) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  // The prompt opened the reasoning: after 6 tokens the conclusion follows, and generation goes on.
  const auto r = run_budget(m, {6, "<think>", "</think>", "\nSo I answer.\n</think>\n\n", true}, 40);
  const size_t k = r.conclusion.size();
  ASSERT_GT(k, 2u);
  EXPECT_EQ(slice(r.limited.tokens, 0, 6), slice(r.free.tokens, 0, 6));  // the model's own reasoning
  EXPECT_EQ(slice(r.limited.tokens, 6, 6 + k), r.conclusion);             // then the conclusion, as tokens
  EXPECT_TRUE(r.limited.reasoning_concluded);
  // Reasoning ends with the conclusion's closing marker.
  EXPECT_EQ(r.limited.reasoning_tokens, 6 + tokens_through(m, r.conclusion, "</think>"));
  EXPECT_EQ(r.limited.tokens.size(), 40u);                              // and the answer goes on
  EXPECT_NE(r.limited.text.find("So I answer."), std::string::npos) << r.limited.text;
  EXPECT_EQ(r.limited.text, m.tok.decode(r.limited.tokens, {.remove_special = false, .render_special = true, .at_start = false}));

  // The answer continues from a context that holds the conclusion: the same tokens as generating
  // greedily from the prompt followed by the reasoning and the conclusion.
  auto prompt = m.tok.encode("Once upon a time", true, false);
  const auto head = slice(r.limited.tokens, 0, 6 + k);
  prompt.insert(prompt.end(), head.begin(), head.end());
  auto s = m.session(256);
  auto sampler = greedy();
  GenerateOptions o;
  o.max_tokens = static_cast<int32_t>(40 - 6 - k);
  const auto rest = generate(*s, m.tok, sampler, prompt, o, nullptr);
  EXPECT_EQ(rest.tokens, slice(r.limited.tokens, 6 + k, 40));

  // A budget of 0 concludes at once.
  const auto zero = run_budget(m, {0, "<think>", "</think>", "\nSo I answer.\n</think>\n\n", true}, 30);
  EXPECT_EQ(slice(zero.limited.tokens, 0, k), zero.conclusion);
}

TEST(Generate, AReasoningBudgetCountsOnlyInsideTheReasoningBlock) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  // The published greedy text: ", there was a little girl named Lily. She loved to play outside...".
  // "little" stands for the opening marker here, "girl" for the closing one.
  const auto closes = run_budget(m, {30, "", "girl", "\nSo.\ngirl\n", true}, 24);
  EXPECT_EQ(closes.limited.tokens, closes.free.tokens);  // the model closed its reasoning in budget
  EXPECT_FALSE(closes.limited.reasoning_concluded);
  // The tokens counted are those up to the one that completed "girl".
  const int32_t through_girl = tokens_through(m, closes.free.tokens, "girl");
  ASSERT_GT(through_girl, 0);
  EXPECT_EQ(closes.limited.reasoning_tokens, through_girl);

  // Reasoning that starts at "little": 2 tokens later the conclusion comes.
  const auto opens = run_budget(m, {2, "little", "girl", "\nSo.\ngirl\n", false}, 24);
  const int32_t through_little = tokens_through(m, opens.free.tokens, "little");
  ASSERT_GT(through_little, 0);
  const auto n = static_cast<size_t>(through_little);
  const size_t k = opens.conclusion.size();
  EXPECT_EQ(slice(opens.limited.tokens, 0, n + 2), slice(opens.free.tokens, 0, n + 2));
  EXPECT_EQ(slice(opens.limited.tokens, n + 2, n + 2 + k), opens.conclusion);
  EXPECT_TRUE(opens.limited.reasoning_concluded);
  // Cut right after the conclusion (later text may open reasoning again): the 2 tokens and the
  // conclusion's up to its closing marker were reasoning.
  const auto exact = run_budget(m, {2, "little", "girl", "\nSo.\ngirl\n", false}, static_cast<int32_t>(n + 2 + k));
  EXPECT_EQ(exact.limited.reasoning_tokens, 2 + tokens_through(m, opens.conclusion, "girl"));

  // No budget: nothing changes, and the reasoning tokens are still counted.
  const auto unlimited = run_budget(m, {-1, "", "girl", "\nSo.\ngirl\n", true}, 24);
  EXPECT_EQ(unlimited.limited.tokens, unlimited.free.tokens);
  EXPECT_EQ(unlimited.limited.reasoning_tokens, through_girl);
}

TEST(Generate, AGrammarConstrainsTheOutputWithOrWithoutOverlap) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  auto grammar = std::make_shared<const sample::Grammar>(
      sample::Grammar::parse(R"(root ::= ", " [a-z ]{1,30} "named " [A-Z] [a-z]+ " " [0-9]{2} "\xE9. " ( "The end." | "Then " [a-z]+ "." ))"));
  std::vector<GenerateResult> results;
  for (bool overlap : {false, true}) {
    for (float temp : {0.0f, 0.9f}) {
      auto s = m.session(256);
      auto params = temp == 0 ? sample::SamplerParams::greedy() : sample::SamplerParams::chat();
      params.temperature = temp;
      params.seed = 11;
      sample::Sampler sampler(params);
      GenerateOptions o;
      o.max_tokens = 60;
      o.decode.at_start = false;
      o.grammar = grammar;
      o.grammar_overlap = overlap;
      results.push_back(generate(*s, m.tok, sampler, prompt, o, nullptr));
      const auto& r = results.back();
      EXPECT_EQ(r.reason, StopReason::EndOfGeneration) << r.text;  // the grammar's sentence ended it
      sample::GrammarMatcher check(grammar, sample::GrammarVocab::from_tokenizer(m.tok));
      EXPECT_TRUE(check.accept_text(r.text) && check.complete()) << r.text;
    }
  }
  // stories260K never puts digits and an é there: those steps needed the whole vocabulary's mask.
  for (const auto& r : results) EXPECT_GT(r.grammar_resamples, 0) << r.text;
  // The mask computed during the evaluation is the one computed on demand: the same tokens.
  EXPECT_EQ(results[0].tokens, results[2].tokens);
  EXPECT_EQ(results[1].tokens, results[3].tokens);
}

TEST(Generate, ALazyGrammarAppliesFromItsTrigger) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto prompt = m.tok.encode("Once upon a time", true, false);
  const auto run = [&](const std::string& gbnf, const std::string& trigger, bool at_start = false) {
    auto s = m.session(256);
    sample::Sampler sampler(sample::SamplerParams::greedy());
    GenerateOptions o;
    o.max_tokens = 60;
    o.decode.at_start = false;
    if (!gbnf.empty()) o.grammar = std::make_shared<const sample::Grammar>(sample::Grammar::parse(gbnf));
    o.grammar_trigger = trigger;
    o.grammar_trigger_at_start = at_start;
    return generate(*s, m.tok, sampler, prompt, o, nullptr);
  };
  const GenerateResult free = run("", "");
  // stories260K's greedy text: ", there was a little girl named Lily. She loved to play ..."
  const size_t named = free.text.find("named");
  ASSERT_NE(named, std::string::npos) << free.text;

  // Free until "named", then the grammar (whose text begins with the trigger) to its end.
  const std::string gbnf = R"(root ::= "named " [A-Z] [a-z]+ " " [0-9]{2} ".")";
  const GenerateResult lazy = run(gbnf, "named");
  ASSERT_GE(lazy.text.size(), named + 5) << lazy.text;
  EXPECT_EQ(lazy.text.substr(0, named + 5), free.text.substr(0, named + 5));
  sample::GrammarMatcher check(std::make_shared<const sample::Grammar>(sample::Grammar::parse(gbnf)),
                               sample::GrammarVocab::from_tokenizer(m.tok));
  EXPECT_TRUE(check.accept_text(lazy.text.substr(named)) && check.complete()) << lazy.text;
  EXPECT_EQ(lazy.reason, StopReason::EndOfGeneration) << lazy.text;

  // A trigger that never appears: the output is the free one, token for token.
  const GenerateResult never = run(gbnf, "dragon");
  EXPECT_EQ(never.tokens, free.tokens);
  EXPECT_EQ(never.grammar_resamples, 0);

  // An occurrence the grammar refuses ("was": "as", not "a little") is passed over; the next one starts it.
  const std::string little = R"(root ::= "a little " [a-z]+ " named Zed.")";
  const GenerateResult second = run(little, "a");
  const size_t at = free.text.find("a little");
  ASSERT_NE(at, std::string::npos);
  ASSERT_LT(free.text.find('a'), at);  // an earlier "a" the grammar refuses
  EXPECT_EQ(second.text, free.text.substr(0, at) + "a little girl named Zed.") << second.text;

  // A trigger that must begin the answer (a Llama 3 call's "{"): where the free text begins with it, the
  // grammar takes the whole answer; where it appears only later, the output stays free.
  ASSERT_EQ(free.text.rfind(", there was a ", 0), 0u) << free.text;
  const std::string opening = R"(root ::= ", there was a " [a-z]+ " named Zed.")";
  const GenerateResult start = run(opening, ",", true);
  sample::GrammarMatcher whole(std::make_shared<const sample::Grammar>(sample::Grammar::parse(opening)),
                               sample::GrammarVocab::from_tokenizer(m.tok));
  EXPECT_TRUE(whole.accept_text(start.text) && whole.complete()) << start.text;
  EXPECT_EQ(start.text.rfind(", there was a little", 0), 0u) << start.text;
  EXPECT_EQ(start.reason, StopReason::EndOfGeneration);
  const GenerateResult later = run(gbnf, "named", true);
  EXPECT_EQ(later.tokens, free.tokens);
  EXPECT_EQ(later.grammar_resamples, 0);
}

TEST(Session, ShiftMatchesEvaluatingTheShiftedContextFromScratch) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const auto ids = m.tok.encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, false);
  ASSERT_GT(ids.size(), 20u);
  auto a = m.session(64);
  a->eval(ids);
  a->shift(3, 7);
  std::vector<int32_t> kept(ids.begin(), ids.begin() + 3);
  kept.insert(kept.end(), ids.begin() + 10, ids.end());
  EXPECT_EQ(a->history(), kept);
  const int32_t next = 42;
  const auto la = a->eval(std::span<const int32_t>(&next, 1));
  const std::vector<float> after_shift(la.begin(), la.end());
  auto b = m.session(64);
  kept.push_back(next);
  const auto lb = b->eval(kept);
  // Exact: the shift recomputes the moved tokens at their new positions, and stories260K's (F32,
  // attention only) arithmetic for a token does not depend on the step it is in.
  EXPECT_EQ(after_shift, std::vector<float>(lb.begin(), lb.end()));
  EXPECT_THROW(a->shift(10, 100), Error);
  EXPECT_THROW(a->shift(0, 0), Error);
}

TEST(ChatSession, SecondTurnPrefillsOnlyTheNewTokens) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  auto s = m.session(512);
  auto sampler = greedy();
  ChatOptions o;
  o.system = "You tell stories.";
  o.generate.max_tokens = 20;
  ChatSession chat(*s, m.tok, sampler, chatml_template(m.tok), o);
  const auto first = chat.send("Once upon a time", nullptr);
  EXPECT_EQ(first.result.cached_tokens, 0);
  EXPECT_FALSE(first.message.content.empty());
  const int64_t in_context = s->n_past();
  const int64_t evaluated = s->tokens_evaluated();

  const auto second = chat.send("Tell me more", nullptr);
  // Everything the context held after the first answer is a prefix of the second prompt: only the
  // rest was evaluated (and the second answer's tokens, all but the last).
  EXPECT_EQ(second.result.cached_tokens, in_context);
  const int64_t new_prompt = second.result.prompt_tokens - in_context;
  EXPECT_GT(new_prompt, 3);
  EXPECT_EQ(s->tokens_evaluated() - evaluated,
            new_prompt + static_cast<int64_t>(second.result.tokens.size()) - 1);
  const auto msgs = chat.messages();
  ASSERT_EQ(msgs.size(), 5u);
  EXPECT_EQ(msgs[0]["role"], "system");
  EXPECT_EQ(msgs[3]["content"], "Tell me more");
  EXPECT_EQ(msgs[4]["content"], second.message.content);
  // ChatML's markers are not tokens of this vocabulary: they end the answer as stop strings.
  EXPECT_EQ(first.message.content.find("<|im_end|>"), std::string::npos);

  chat.reset();
  EXPECT_EQ(s->n_past(), 0);
  EXPECT_EQ(chat.messages().size(), 1u);  // the system prompt stays
}

TEST(ChatSession, RendersChatMlForModelsWithoutATemplate) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  auto s = m.session(64);
  auto sampler = greedy();
  ChatOptions o;
  o.system = "S";
  ChatSession chat(*s, m.tok, sampler, chat_template_for(m.file, m.tok), o);
  chat.load(nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}])"));
  EXPECT_EQ(chat.system(), "");  // a loaded conversation brings its own system prompt, or none
  chat.set_system("S");
  EXPECT_EQ(chat.render(true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
            "<|im_start|>assistant\n");
  for (const char* bad : {R"({"role":"user"})", R"([{"role":"user"}])", R"([{"role":"tool","content":"x"}])",
                          R"([{"role":"user","content":"a"},{"role":"system","content":"late"}])"}) {
    EXPECT_THROW(chat.load(nlohmann::ordered_json::parse(bad)), Error) << bad;
  }
}

TEST(ChatSession, ContextLimitIsAClearErrorOrDropsTheOldestTurns) {
  ZINC_REQUIRE_TESTDATA();
  Stories m;
  const std::vector<std::string> messages = {"Once upon a time there was a dog.", "The dog was big and brown.",
                                             "Then the dog ran to the park.", "It played with a ball all day long.",
                                             "At night the dog went home to sleep."};
  for (bool drop : {false, true}) {
    auto s = m.session(200);
    auto sampler = greedy();
    ChatOptions o;
    o.drop_oldest_turns = drop;
    o.generate.max_tokens = 30;
    ChatSession chat(*s, m.tok, sampler, chatml_template(m.tok), o);
    bool refused = false;
    int dropped = 0;
    for (const auto& text : messages) {
      const auto before = chat.messages();
      if (!drop) {
        try {
          chat.send(text, nullptr);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("--drop-old-turns"), std::string::npos) << e.what();
          EXPECT_EQ(chat.messages(), before);  // nothing changed
          refused = true;
          break;
        }
      } else {
        dropped += chat.send(text, nullptr).dropped_messages;
        EXPECT_LE(s->n_past(), 200);
      }
    }
    if (!drop) {
      EXPECT_TRUE(refused) << "five exchanges of ~45 tokens cannot fit 200";
    } else {
      EXPECT_GE(dropped, 2);
      const auto after = chat.messages();
      EXPECT_NE(after[0]["content"], messages[0]);
      EXPECT_EQ(after[after.size() - 2]["content"], messages.back());
    }
  }
  // One message larger than the whole context is an error even when dropping turns.
  auto s = m.session(64);
  auto sampler = greedy();
  ChatOptions o;
  o.drop_oldest_turns = true;
  ChatSession chat(*s, m.tok, sampler, chatml_template(m.tok), o);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "The cat sat. ";
  EXPECT_THROW(chat.send(long_text, nullptr), Error);
  EXPECT_TRUE(chat.messages().empty());
}

}  // namespace
}  // namespace zinc::runtime
