/* rl_evalsha: the digests of the scripts sent by EVALSHA (see rl_evalsha.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_evalsha.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "rl_scripts.h"

#define SCRIPT(text) {text, sizeof text - 1}
static const struct {
    const char *text;
    size_t len;
} scripts[RL_EVALSHA_SCRIPTS] = {
    SCRIPT(RL_SCRIPT_ACQUIRE_FENCED), SCRIPT(RL_SCRIPT_RELEASE), SCRIPT(RL_SCRIPT_EXTEND),
    SCRIPT(RL_SCRIPT_ACQUIRE_SHARED),
    SCRIPT(RL_SCRIPT_QUEUE_TURN), SCRIPT(RL_SCRIPT_RELEASE_FAIR), /* a fair wait's turns, its release */
};

static char digests[RL_EVALSHA_SCRIPTS][41]; /* "" when not computed */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void compute(void) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < RL_EVALSHA_SCRIPTS; i++) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_Digest(scripts[i].text, scripts[i].len, md, &n, EVP_sha1(), NULL) != 1 || n != 20) continue;
        for (unsigned j = 0; j < n; j++) {
            digests[i][2 * j] = hex[md[j] >> 4];
            digests[i][2 * j + 1] = hex[md[j] & 15];
        }
        digests[i][40] = '\0';
    }
}

int rl_evalsha_index(const char *s, size_t len) {
    for (int i = 0; i < RL_EVALSHA_SCRIPTS; i++)
        if (len == scripts[i].len && (s == scripts[i].text || memcmp(s, scripts[i].text, len) == 0)) return i;
    return -1;
}

const char *rl_evalsha_script(int i, size_t *len) {
    *len = scripts[i].len;
    return scripts[i].text;
}

const char *rl_evalsha_digest(int i) {
    pthread_once(&once, compute);
    return i >= 0 && i < RL_EVALSHA_SCRIPTS && digests[i][0] ? digests[i] : NULL;
}

int rl_evalsha_not_run(const char *text, size_t len) {
    if (!text) return RL_EVALSHA_RAN;
    if (len >= 8 && memcmp(text, "NOSCRIPT", 8) == 0) return RL_EVALSHA_NOSCRIPT;
    if (len >= 6 && memcmp(text, "NOPERM", 6) == 0 && memmem(text, len, "'evalsha' command", 17) != NULL)
        return RL_EVALSHA_REFUSED;
    /* "ERR unknown command 'EVALSHA', ...": the command name as sent, in
     * quotes (backquotes before Redis 7). A script calling an unknown
     * command gets "ERR Unknown Redis command called from script". */
    static const char unknown[] = "ERR unknown command ";
    size_t ulen = sizeof unknown - 1;
    if (len >= ulen + 9 && memcmp(text, unknown, ulen) == 0 && (text[ulen] == '\'' || text[ulen] == '`') &&
        strncasecmp(text + ulen + 1, "evalsha", 7) == 0 &&
        (text[ulen + 8] == '\'' || text[ulen + 8] == '`'))
        return RL_EVALSHA_REFUSED;
    return RL_EVALSHA_RAN;
}
