/* rl_evalsha: the digests of the scripts sent by EVALSHA (see rl_evalsha.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_evalsha.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

#include "rl_scripts.h"

static const char *const scripts[RL_EVALSHA_SCRIPTS] = {
    RL_SCRIPT_ACQUIRE_HOLDER, RL_SCRIPT_ACQUIRE_FENCED, RL_SCRIPT_RELEASE, RL_SCRIPT_EXTEND,
    RL_SCRIPT_ACQUIRE_SHARED,
};
static const size_t lengths[RL_EVALSHA_SCRIPTS] = {
    sizeof RL_SCRIPT_ACQUIRE_HOLDER - 1, sizeof RL_SCRIPT_ACQUIRE_FENCED - 1, sizeof RL_SCRIPT_RELEASE - 1,
    sizeof RL_SCRIPT_EXTEND - 1, sizeof RL_SCRIPT_ACQUIRE_SHARED - 1,
};

static char digests[RL_EVALSHA_SCRIPTS][41]; /* "" when not computed */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void compute(void) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < RL_EVALSHA_SCRIPTS; i++) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_Digest(scripts[i], lengths[i], md, &n, EVP_sha1(), NULL) != 1 || n != 20) continue;
        for (unsigned j = 0; j < n; j++) {
            digests[i][2 * j] = hex[md[j] >> 4];
            digests[i][2 * j + 1] = hex[md[j] & 15];
        }
        digests[i][40] = '\0';
    }
}

int rl_evalsha_index(const char *s, size_t len) {
    for (int i = 0; i < RL_EVALSHA_SCRIPTS; i++)
        if (len == lengths[i] && (s == scripts[i] || memcmp(s, scripts[i], len) == 0)) return i;
    return -1;
}

const char *rl_evalsha_digest(int i) {
    pthread_once(&once, compute);
    return i >= 0 && i < RL_EVALSHA_SCRIPTS && digests[i][0] ? digests[i] : NULL;
}

int rl_evalsha_not_run(const char *text, size_t len) {
    if (!text) return 0;
    if (len >= 8 && memcmp(text, "NOSCRIPT", 8) == 0) return 1;
    return len >= 6 && memcmp(text, "NOPERM", 6) == 0 && memmem(text, len, "'evalsha' command", 17) != NULL;
}
