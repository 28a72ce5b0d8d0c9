/* The C interface (models/c_api.h) from a C program. Usage: c_api_test CHECKPOINT PROMPT COUNT
 * (PROMPT: comma-separated ids). Generates COUNT tokens greedily from the checkpoint loaded by path, then checks
 * that a load from a copy of the file in memory, and eng_step with its own argmax, give the same ids; that a bad
 * path, a corrupt buffer, a token outside the vocabulary, a step past max_len and null arguments each fail with a
 * message naming the problem. Prints the ids as embed does (tests/tools/embed_lean_c_api.sh compares them); exits 1
 * when a check failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/c_api.h"

#define MAX_TOKENS 256

static int fail(const char* what) {
  fprintf(stderr, "c_api_test: FAIL %s (last error: '%s')\n", what, eng_last_error());
  return 1;
}

/* The error of the last call is `status` and mentions `text`. */
static int refused(eng_status got, eng_status want, const char* text, const char* what) {
  if (got != want || strstr(eng_last_error(), text) == NULL) {
    fprintf(stderr, "c_api_test: FAIL %s: status %d (want %d), message '%s' lacks '%s'\n", what, (int)got,
            (int)want, eng_last_error(), text);
    return 1;
  }
  return 0;
}

static unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  unsigned char* data = NULL;
  long n;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc((size_t)n);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
      free(data);
      data = NULL;
    }
    *size = (size_t)n;
  }
  fclose(f);
  return data;
}

static size_t parse_prompt(const char* text, int64_t* ids) {
  size_t n = 0;
  char* end;
  while (n < MAX_TOKENS) {
    ids[n++] = strtoll(text, &end, 10);
    if (*end != ',') break;
    text = end + 1;
  }
  return n;
}

/* count tokens by eng_step and the argmax of its logits, after a reset. */
static int step_greedy(eng_model* m, const int64_t* prompt, size_t n, size_t count, int64_t* out) {
  const float* logits = NULL;
  size_t i;
  int64_t v, vocab = eng_vocab(m);
  eng_reset(m);
  for (i = 0; i < n; ++i)
    if (eng_step(m, prompt[i], &logits) != ENG_OK) return 1;
  for (i = 0; i < count; ++i) {
    int64_t best = 0;
    for (v = 1; v < vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    out[i] = best;
    if (i + 1 < count && eng_step(m, best, &logits) != ENG_OK) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int64_t prompt[MAX_TOKENS], by_path[MAX_TOKENS], by_buffer[MAX_TOKENS], by_step[MAX_TOKENS], token = 0;
  size_t n, count, i, size = 0;
  eng_model *m = NULL, *b = NULL, *bad = NULL;
  unsigned char* data;
  const float* logits;
  int failures = 0;
  if (argc != 4) {
    fprintf(stderr, "usage: c_api_test CHECKPOINT PROMPT COUNT\n");
    return 2;
  }
  n = parse_prompt(argv[2], prompt);
  count = (size_t)atoi(argv[3]);
  if (count < 1 || count > MAX_TOKENS) return fail("COUNT must be 1..256");

  if (eng_load_file(argv[1], &m) != ENG_OK) return fail("eng_load_file");
  if (strcmp(eng_last_error(), "") != 0) return fail("a load that succeeded leaves an error");
  if (eng_generate(m, prompt, n, count, by_path) != ENG_OK) return fail("eng_generate");
  if (eng_length(m) != (int64_t)(n + count - 1)) return fail("eng_length after eng_generate");
  if (step_greedy(m, prompt, n, count, by_step) != 0) return fail("eng_step");
  data = read_file(argv[1], &size);
  if (!data) return fail("reading the checkpoint into memory");
  if (eng_load_buffer(data, size, &b) != ENG_OK) return fail("eng_load_buffer");
  if (eng_generate(b, prompt, n, count, by_buffer) != ENG_OK) return fail("eng_generate from a buffer");
  for (i = 0; i < count; ++i) {
    if (by_path[i] != by_buffer[i]) failures += fail("the buffer's ids differ from the path's");
    if (by_path[i] != by_step[i]) failures += fail("eng_step's ids differ from eng_generate's");
  }

  /* Refusals: each a status and a message, the model still usable after. */
  failures += refused(eng_load_file("/nonexistent/model.st", &bad), ENG_ERROR_MODEL, "/nonexistent/model.st",
                      "a bad path");
  if (bad != NULL) failures += fail("a failed load leaves *out null");
  failures += refused(eng_load_buffer(data, size / 2, &bad), ENG_ERROR_MODEL, "buffer of", "a truncated buffer");
  memset(data, 'x', 16); /* the header length and the start of the JSON header */
  failures += refused(eng_load_buffer(data, size, &bad), ENG_ERROR_MODEL, "buffer of", "a corrupt header");
  failures += refused(eng_load_file(NULL, &bad), ENG_ERROR_ARGUMENT, "must not be null", "a null path");
  eng_reset(m);
  failures += refused(eng_step(m, eng_vocab(m), &logits), ENG_ERROR_ARGUMENT, "outside 0..", "a token past vocab");
  failures += refused(eng_step(m, -1, &logits), ENG_ERROR_ARGUMENT, "outside 0..", "a negative token");
  for (i = 0; i < (size_t)eng_max_len(m); ++i)
    if (eng_step(m, token, &logits) != ENG_OK) failures += fail("a step within max_len");
  failures += refused(eng_step(m, token, &logits), ENG_ERROR_ARGUMENT, "max_len", "a step past max_len");
  eng_reset(m);
  failures += refused(eng_generate(m, prompt, n, (size_t)eng_max_len(m) + 1, by_step), ENG_ERROR_ARGUMENT,
                      "positions left", "generating past max_len");
  failures += refused(eng_generate(m, prompt, 0, 1, by_step), ENG_ERROR_ARGUMENT, "prompt_len", "an empty prompt");

  eng_free(b);
  eng_free(m);
  eng_free(NULL);
  free(data);
  for (i = 0; i < count; ++i) printf("%s%lld", i ? "," : "", (long long)by_path[i]);
  printf("\n");
  return failures ? 1 : 0;
}
