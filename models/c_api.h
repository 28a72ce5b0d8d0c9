/* The library from C (or any language with a C FFI): load a decoder-only checkpoint written by train, feed it token
 * ids one at a time, read its logits or generate greedily. It runs the models the allocation-free Generator runs
 * (models/generator.h: softmax, linear and causal-linear attention; f32, q8_0 or q4_0 weights); tokenizing is the
 * caller's. No C++ exception crosses these functions. Ownership, errors and threads: docs/embedding.md.
 *
 * Errors: a function that can fail returns an eng_status; on failure eng_last_error() gives the message (it names
 * the file, buffer or argument and what is wrong). In a build of the library without exceptions (-fno-exceptions),
 * a failure inside the library cannot be returned: the handler set with eng_set_error_handler gets the message,
 * then the process aborts (docs/embedding.md). */
#ifndef ENG_C_API_H
#define ENG_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ENG_OK = 0,
  ENG_ERROR_ARGUMENT = 1, /* a null pointer, a token outside the vocabulary, a step past max_len */
  ENG_ERROR_MODEL = 2,    /* an unreadable, corrupt or unsupported checkpoint */
  ENG_ERROR_MEMORY = 3    /* out of memory */
} eng_status;

typedef struct eng_model eng_model;

/* Loads the checkpoint at `path` (mapped read-only, not copied) into *out; eng_free releases it. */
eng_status eng_load_file(const char* path, eng_model** out);
/* The same from `size` bytes at `data`, which the caller keeps valid and unchanged until eng_free(*out): the
 * weights are read where they lie. */
eng_status eng_load_buffer(const void* data, size_t size, eng_model** out);
void eng_free(eng_model* model); /* null is allowed */

int64_t eng_vocab(const eng_model* model);   /* token ids are 0 .. vocab - 1 */
int64_t eng_max_len(const eng_model* model); /* positions one sequence may hold */
int64_t eng_length(const eng_model* model);  /* positions fed since the load or the last eng_reset */
void eng_reset(eng_model* model);            /* starts a new sequence */

/* Feeds `token` at the next position; *logits (vocab floats, owned by the model) stay valid until the next call on
 * the same model. */
eng_status eng_step(eng_model* model, int64_t token, const float** logits);
/* Feeds the `prompt_len` >= 1 tokens of `prompt`, then writes `count` greedy continuations (each the largest
 * logit, fed back) to out[0 .. count - 1]: prompt_len + count - 1 positions, at most max_len - eng_length. */
eng_status eng_generate(eng_model* model, const int64_t* prompt, size_t prompt_len, size_t count, int64_t* out);

/* The message of this thread's last failed call; "" after a call that succeeded. Valid until the thread's next
 * call. */
const char* eng_last_error(void);

/* Builds without exceptions only: called with the message of a failed check, before the process aborts. Null
 * restores the default (print the message to stderr). */
typedef void (*eng_error_handler)(const char* message, void* user);
void eng_set_error_handler(eng_error_handler handler, void* user);

#ifdef __cplusplus
}
#endif

#endif /* ENG_C_API_H */
