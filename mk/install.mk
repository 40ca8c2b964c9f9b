# Installing (included by the Makefile):
#   make install     copies ./redlock.so to $(DESTDIR)$(LIBDIR)/redlock.so
#   make uninstall   removes that file again
#   make deb         builds $(DEB_DIR)/libsqlite3-mod-redlock_<version>_<arch>.deb
#   make version     prints the version
#
# SQLite loads a bare name (`.load redlock`) with dlopen("redlock"), then
# dlopen("redlock.so"). With no slash in the name, dlopen looks in
# LD_LIBRARY_PATH, in ld.so's cache (which only ever holds lib* names) and
# in the system directories, which on Debian are /lib/<multiarch>,
# /usr/lib/<multiarch>, /lib and /usr/lib: never /usr/local/lib. So the
# default is PREFIX=/usr and LIBDIR=/usr/lib/<multiarch>, where Debian's own
# libsqlite3-mod-spatialite keeps mod_spatialite.so. A LIBDIR elsewhere works
# but needs the full path: `.load /usr/local/lib/x86_64-linux-gnu/redlock`.
# SPDX-License-Identifier: BSD-3-Clause

# The version's one home is REDLOCK_VERSION in ext/redlock_version.h.
REDLOCK_VERSION := $(shell sed -n 's/^\#define REDLOCK_VERSION "\([^"]*\)"$$/\1/p' ext/redlock_version.h)
PREFIX    ?= /usr
MULTIARCH ?= $(shell m=$$($(CC) -print-multiarch 2>/dev/null); \
               [ -n "$$m" ] || m=$$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null); echo "$$m")
LIBDIR    ?= $(PREFIX)/lib$(if $(MULTIARCH),/$(MULTIARCH))
DEB_DIR   ?= build/deb

# Where dlopen finds a name without a slash (glibc's system directories).
DLOPEN_DIRS = $(if $(MULTIARCH),/lib/$(MULTIARCH) /usr/lib/$(MULTIARCH)) /lib /usr/lib
INSTALLED   = $(DESTDIR)$(LIBDIR)/redlock.so

# A file that a Debian package owns (the .deb of `make deb`) is dpkg's to
# replace or remove: `make install` and `make uninstall` leave it alone.
# dpkg lists a file under one spelling of its path, so each is asked: as
# given, with its links resolved (LIBDIR through a symbolic link), and with
# and without /usr (a merged-/usr system's /lib is /usr/lib), as
# scripts/build-deb.sh does.
define refuse_if_packaged
	@if [ -z '$(DESTDIR)' ]; then p='$(LIBDIR)/redlock.so'; owner=; \
	  for c in "$$p" "$$(readlink -f "$$p" 2>/dev/null)" "/usr$$p" "$${p#/usr}"; do \
	    [ -n "$$c" ] && owner=$$(dpkg-query -S "$$c" 2>/dev/null) && break; owner=; done; \
	  if [ -n "$$owner" ]; then owner=$${owner%%:*}; \
	    echo "redlock: $(LIBDIR)/redlock.so belongs to the Debian package $$owner: remove it with 'apt-get remove $$owner', or give another LIBDIR=" >&2; \
	    exit 1; fi; fi
endef

.PHONY: install uninstall deb version

# install(1) unlinks an existing file before writing the new one, so a
# process that has the old redlock.so loaded keeps its copy intact.
install: redlock.so ## copy redlock.so to $(DESTDIR)$(LIBDIR) (PREFIX, LIBDIR, DESTDIR)
	$(refuse_if_packaged)
	install -d -m 0755 '$(DESTDIR)$(LIBDIR)'
	install -m 0644 redlock.so '$(INSTALLED)'
	@if [ -z '$(DESTDIR)' ]; then \
	  case ' $(DLOPEN_DIRS) ' in \
	    *' $(LIBDIR) '*) echo "redlock: installed; '.load redlock' now works in the sqlite3 shell from any directory" ;; \
	    *) echo "redlock: installed; $(LIBDIR) is not searched for a bare name, so load it as '.load $(LIBDIR)/redlock'" ;; \
	  esac; fi

uninstall: ## remove the file make install wrote
	$(refuse_if_packaged)
	rm -f '$(INSTALLED)'

deb: redlock.so ## build the Debian package in $(DEB_DIR)
	@[ -n '$(MULTIARCH)' ] || { echo "redlock: no multiarch triplet ($(CC) -print-multiarch printed nothing); give MULTIARCH=" >&2; exit 1; }
	@bash scripts/build-deb.sh redlock.so '$(REDLOCK_VERSION)' '$(MULTIARCH)' '$(DEB_DIR)'

version: ## print the version
	@echo '$(REDLOCK_VERSION)'
