/* no_dns: the fuzz targets are linked with -Wl,--wrap=getaddrinfo so that a
 * fuzzed host name is never looked up in DNS: only numeric addresses
 * resolve; a name fails as an unknown host would. No fuzz run sends a packet
 * anywhere.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <netdb.h>
#include <stddef.h>

int __real_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    struct addrinfo h = {0};
    if (hints) h = *hints;
    h.ai_flags |= AI_NUMERICHOST | AI_NUMERICSERV;
    return __real_getaddrinfo(node, service, &h, res);
}
