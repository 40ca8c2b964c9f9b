/* replay_main: runs a fuzz target's LLVMFuzzerTestOneInput over files and
 * directories without libFuzzer, so the corpus (seeds and every crash input
 * kept as a regression) is replayed by any compiler with sanitizers:
 *     replay_url fuzz/corpus/url
 * Exits 0 when every input ran; a finding aborts through the sanitizer.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return -1;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        unsigned char *nb = realloc(buf, cap);
        if (!nb) free(buf);
        buf = nb;
    }
    fclose(f);
    /* An exact-size copy, so that ASan sees a read past the input's end. */
    unsigned char *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int run_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (run_file(path) != 0) return -1;
        ++*count;
        return 0;
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort), rc = 0;
    if (n < 0) {
        perror(path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && rc == 0) {
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
            rc = run_path(child, count);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    int count = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0) return 1;
    printf("%s: replayed %d inputs\n", argc > 0 ? argv[0] : "replay", count);
    return 0;
}
