/* redlock_version: the extension's version, in one place: redlock_version(),
 * the Debian package (mk/install.mk) and the CHANGELOG read it from here.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_VERSION_H
#define REDLOCK_VERSION_H

#define REDLOCK_VERSION "0.1.0"

#endif
