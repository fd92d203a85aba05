/* Titus's C shim over libfabric. See tofi.h. */
#define _GNU_SOURCE
#include "tofi.h"

/* libfabric is loaded on first use (dlopen), not with the program. Debian's libfabric.so.1
 * links its psm providers' libraries, and libinfinipath's constructor alone sleeps ~0.2 s
 * (usleep(125), ~940 times) in every process that loads it: every titus command, rank and
 * C client paid that at start-up, though the node backend and the simulator need nothing
 * of libfabric. The five functions libfabric exports that this shim calls (the rest of its
 * API is inline in the headers, through the objects' operation tables) are renamed here
 * before the headers are read, and resolved from the loaded library by `lf_ready`: the
 * shim neither defines nor references a `fi_` symbol, so it cannot interpose on a
 * libfabric that the application (its MPI) links itself. The newest versions of the
 * symbols are taken, as a link against this libfabric would; `fi_info` structures are
 * allocated and read through them alone, and libfabric only appends to them. */
#define fi_getinfo tofi_lf_getinfo
#define fi_freeinfo tofi_lf_freeinfo
#define fi_dupinfo tofi_lf_dupinfo
#define fi_fabric tofi_lf_fabric
#define fi_strerror tofi_lf_strerror

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <time.h>
#include <pthread.h>

/* Crash handlers that are not ours.
 *
 * Debian's libfabric links its psm providers' libraries, and libinfinipath's constructor
 * installs handlers for SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM that write
 * `<prog>.80s-<pid>,<host>.btr` into the working directory and exit with status 1 (it
 * honours IPATH_NO_BACKTRACE, but its constructor runs before any code of ours could set
 * it), replacing any handler installed before. A segmentation fault then never shows as
 * one, and Ctrl-C or a launcher's SIGTERM leaves a file behind. So every such signal whose
 * handler's code lies in libinfinipath or libpsm (dladdr) gets back
 * 1. around loading libfabric (`lf_load`, on first use) and every fi_getinfo (a provider
 *    may initialise its library then): the disposition it had before — the application's
 *    handler, Rust's stack-overflow handler for SIGSEGV/SIGBUS, or the default;
 * 2. when this shim is loaded (its constructor, for a program that links those libraries
 *    itself): the default, so that Rust's runtime, which installs its handler only over
 *    the default, installs it when `main` starts. */
static const int crash_signals[] = {SIGINT, SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGTERM};

static int handler_is_foreign(int sig) {
    struct sigaction sa;
    if (sigaction(sig, NULL, &sa) != 0) return 0;
    void *h = (sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction : (void *)sa.sa_handler;
    if (h == (void *)SIG_DFL || h == (void *)SIG_IGN) return 0;
    Dl_info di;
    if (!dladdr(h, &di) || !di.dli_fname) return 0;
    return strstr(di.dli_fname, "libinfinipath") != NULL || strstr(di.dli_fname, "libpsm") != NULL;
}

static void restore_crash_signals(void) {
    for (size_t i = 0; i < sizeof crash_signals / sizeof *crash_signals; i++)
        if (handler_is_foreign(crash_signals[i])) signal(crash_signals[i], SIG_DFL);
}

__attribute__((constructor)) static void tofi_load(void) { restore_crash_signals(); }

/* The crash signals' dispositions, saved before a call that may run those libraries'
 * constructors or initialisers (loading libfabric, fi_getinfo), and given back after it
 * wherever one of them took a signal over: libinfinipath replaces whatever handler was
 * installed, the application's own too. */
typedef struct sigaction crash_dispositions[sizeof crash_signals / sizeof *crash_signals];

static void save_crash_signals(crash_dispositions saved) {
    for (size_t i = 0; i < sizeof crash_signals / sizeof *crash_signals; i++)
        if (sigaction(crash_signals[i], NULL, &saved[i]) != 0) saved[i].sa_handler = SIG_DFL;
}

static void give_back_crash_signals(crash_dispositions saved) {
    for (size_t i = 0; i < sizeof crash_signals / sizeof *crash_signals; i++)
        if (handler_is_foreign(crash_signals[i])) sigaction(crash_signals[i], &saved[i], NULL);
}

/* libfabric's exported functions, once loaded (all of them or none: `lf.ok`). */
static struct {
    int ok;
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
} lf;
static pthread_once_t lf_once = PTHREAD_ONCE_INIT;
static char lf_error[640] = "libfabric not loaded";

static void lf_open(void) {
    void *h = NULL;
    char first[400] = "";
#ifdef TOFI_LIBDIR
    /* The libfabric this shim was built against (pkg-config's libdir), then the loader's
     * search path (LD_LIBRARY_PATH, the system's). */
    h = dlopen(TOFI_LIBDIR "/libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(first, sizeof first, "%s; ", dlerror());
#endif
    if (!h) h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lf_error, sizeof lf_error, "cannot load libfabric: %s%s", first, dlerror());
        return;
    }
    static const char *const names[] = {"fi_getinfo", "fi_freeinfo", "fi_dupinfo", "fi_fabric", "fi_strerror"};
    void *syms[5];
    for (size_t i = 0; i < 5; i++) {
        syms[i] = dlsym(h, names[i]);
        if (!syms[i]) {
            snprintf(lf_error, sizeof lf_error, "the loaded libfabric.so.1 has no %s", names[i]);
            dlclose(h);
            return;
        }
    }
    /* (POSIX: a dlsym result converts to a function pointer.) */
    memcpy(&lf.getinfo, &syms[0], sizeof syms[0]);
    memcpy(&lf.freeinfo, &syms[1], sizeof syms[1]);
    memcpy(&lf.dupinfo, &syms[2], sizeof syms[2]);
    memcpy(&lf.fabric, &syms[3], sizeof syms[3]);
    memcpy(&lf.strerror, &syms[4], sizeof syms[4]);
    lf.ok = 1;
}

static void lf_load(void) {
    crash_dispositions saved;
    save_crash_signals(saved);
    lf_open();
    /* Its psm libraries' constructors just ran: the handlers they installed go. */
    give_back_crash_signals(saved);
}

/* Loads libfabric on the first call; whether it is loaded (else `lf_error` says why). */
static int lf_ready(void) {
    pthread_once(&lf_once, lf_load);
    return lf.ok;
}

int tofi_lf_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                    const struct fi_info *hints, struct fi_info **info) {
    if (!lf_ready()) return -FI_ENOSYS;
    /* A provider may initialise its library now (see above). */
    crash_dispositions saved;
    save_crash_signals(saved);
    int ret = lf.getinfo(version, node, service, flags, hints, info);
    give_back_crash_signals(saved);
    return ret;
}

void tofi_lf_freeinfo(struct fi_info *info) {
    if (info && lf_ready()) lf.freeinfo(info);
}

struct fi_info *tofi_lf_dupinfo(const struct fi_info *info) { return lf_ready() ? lf.dupinfo(info) : NULL; }

int tofi_lf_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context) {
    if (!lf_ready()) return -FI_ENOSYS;
    return lf.fabric(attr, fabric, context);
}

const char *tofi_lf_strerror(int errnum) { return lf_ready() ? lf.strerror(errnum) : lf_error; }

uint64_t tofi_foreign_crash_handlers(void) {
    uint64_t bits = 0;
    for (size_t i = 0; i < sizeof crash_signals / sizeof *crash_signals; i++)
        if (handler_is_foreign(crash_signals[i])) bits |= (uint64_t)1 << crash_signals[i];
    return bits;
}

/* One in-flight operation: the provider's context (first, so the completion's op_context
 * points at the slot), the caller's id, and registered temporaries for atomics and
 * signals. */
struct slot {
    struct fi_context2 fctx;
    uint64_t opid;
    uint64_t operand; /* CAS desired / fetch-add delta / signal sender */
    uint64_t compare; /* CAS expected / signal value */
    uint64_t result;  /* atomic old value */
};

struct recv_slot {
    struct fi_context2 fctx;
    uint64_t msg[2]; /* sender, value */
};

struct tofi {
    struct fi_info *info; /* fi_getinfo's whole list (freed at close) */
    struct fi_info *fi;   /* the entry opened */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    size_t nsegs;
    struct fid_mr **mrs;
    uint64_t *keys;
    uint64_t *bases; /* what peers use: the virtual address, or 0 under offset addressing */
    char **ptrs;     /* where the segment is in this process */
    void **descs;
    struct slot *slots;
    size_t nslots;
    struct fid_mr *slots_mr;
    void *slots_desc;
    struct recv_slot *recvs;
    size_t nrecv;
    struct fid_mr *recvs_mr;
    void *recvs_desc;
    uint32_t caps;
    int woken;        /* tofi_wake was called: a blocked tofi_poll returns */
    long idle_ns;     /* current sleep between empty reads when the CQ cannot block */
    long max_idle_ns; /* its cap (TITUS_PROGRESS_MAX_SLEEP_US) */
    char prov[64];
};

static void msg(char *err, size_t len, const char *what, int ret) {
    if (err && len) snprintf(err, len, "%s: %s (%d)", what, fi_strerror(-ret), ret);
}

const char *tofi_strerror(int err) { return fi_strerror(err < 0 ? -err : err); }

void tofi_wake(tofi *h) {
    __atomic_store_n(&h->woken, 1, __ATOMIC_RELEASE);
    if (h->caps & TOFI_CAP_CQ_WAIT) fi_cq_signal(h->cq);
}

void tofi_set_max_nap(tofi *h, uint64_t ns) {
    __atomic_store_n(&h->max_idle_ns, (long)(ns < 1000 ? 1000 : ns), __ATOMIC_RELAXED);
}

static struct fi_info *hints_for(const char *prov) {
    struct fi_info *hints = fi_allocinfo();
    if (!hints) return NULL;
    hints->caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND |
                  FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    /* Every memory-registration mode we can honour: the provider keeps what it needs. */
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
    return hints;
}

int tofi_providers(char *buf, size_t len) {
    if (len) buf[0] = 0;
    if (!lf_ready()) return -FI_ENOSYS; /* tofi_strerror says why */
    struct fi_info *hints = hints_for(NULL), *info = NULL, *cur;
    if (!hints) return -FI_ENOMEM;
    int ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &info);
    fi_freeinfo(hints);
    if (ret == -FI_ENODATA) return 0;
    if (ret) return ret;
    /* One entry per provider (fi_getinfo lists one per interface). */
    char seen[4096] = ",";
    size_t used = 0;
    for (cur = info; cur; cur = cur->next) {
        const char *name = cur->fabric_attr->prov_name;
        char key[96];
        snprintf(key, sizeof key, ",%s,", name);
        if (strstr(seen, key)) continue;
        size_t n = strlen(name);
        if (used + n + 2 > len || strlen(seen) + n + 2 > sizeof seen) break;
        strcat(seen, name);
        strcat(seen, ",");
        if (used) buf[used++] = ',';
        memcpy(buf + used, name, n);
        used += n;
        buf[used] = 0;
    }
    fi_freeinfo(info);
    return 0;
}

static int reg(tofi *h, void *base, uint64_t len, uint64_t key, struct fid_mr **mr, void **desc, char *err,
               size_t errlen) {
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
    int ret = fi_mr_reg(h->domain, base, len, access, 0, key, 0, mr, NULL);
    if (ret) {
        msg(err, errlen, "fi_mr_reg", ret);
        return ret;
    }
    if (h->fi->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        ret = fi_mr_bind(*mr, &h->ep->fid, 0);
        if (!ret) ret = fi_mr_enable(*mr);
        if (ret) {
            msg(err, errlen, "fi_mr_bind/enable", ret);
            return ret;
        }
    }
    *desc = fi_mr_desc(*mr);
    return 0;
}

/* How far an IP address reaches (tofi_addr_reach): 0 this host only — loopback (127/8,
 * ::1, ::ffff:127/104) and IPv6 link-local (fe80::/10, whose scope does not travel in a
 * published address); 1 its link only — IPv4 link-local (169.254/16: a BMC's USB NIC, an
 * unconfigured port), reachable by hosts on the same segment and nobody else; 2 routable.
 * Anything that is not an IP address (verbs' own formats, shm) counts as routable. */
int tofi_addr_reach(const void *addr, size_t len) {
    if (!addr) return 2;
    const struct sockaddr *sa = addr;
    if (len >= sizeof(struct sockaddr_in) && sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
        if ((a >> 24) == 127) return 0;
        return (a >> 16) == 0xa9fe ? 1 : 2;
    }
    if (len >= sizeof(struct sockaddr_in6) && sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a)) return 0;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            if (a->s6_addr[12] == 127) return 0;
            if (a->s6_addr[12] == 169 && a->s6_addr[13] == 254) return 1;
        }
        return 2;
    }
    return 2;
}

/* How far an entry's source address reaches (tofi_addr_reach); entries without an IP
 * source address count as routable. */
static int reach(const struct fi_info *fi) {
    if (!fi->src_addr) return 2;
    if (fi->addr_format != FI_SOCKADDR_IN && fi->addr_format != FI_SOCKADDR_IN6) return 2;
    return tofi_addr_reach(fi->src_addr, fi->src_addrlen);
}

/* Whether `name` is one of the ", "-separated names in `names` (whole names: "eth1" is not
 * listed by "eth10"). */
static int listed(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *end = strstr(p, ", ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!end) break;
        p = end + 2;
    }
    return 0;
}

/* The entry to open: the first on domain (interface) `iface` when one is named, else the
 * first that other hosts can reach, else the first (a machine with loopback only). NULL
 * when `iface` names no domain of the list; `names` then lists those there are. */
static struct fi_info *choose(struct fi_info *list, const char *iface, char *names, size_t len) {
    struct fi_info *cur;
    if (iface && *iface) {
        if (len) names[0] = 0;
        for (cur = list; cur; cur = cur->next) {
            const char *d = cur->domain_attr->name ? cur->domain_attr->name : "";
            if (!strcmp(d, iface)) return cur;
            char key[80];
            snprintf(key, sizeof key, "%s%s", *names ? ", " : "", d);
            if (*d && !listed(names, d) && strlen(names) + strlen(key) + 1 < len) strcat(names, key);
        }
        return NULL;
    }
    /* The first entry that other hosts can route to, else the first on a link (a host
     * whose only other interface is link-local), else the first: libfabric lists
     * interfaces in the system's order, where a BMC's 169.254 port may come first. */
    for (int want = 2; want > 0; want--)
        for (cur = list; cur; cur = cur->next)
            if (reach(cur) >= want) return cur;
    return list;
}

/* libfabric's shm provider backs each endpoint with a file /dev/shm/<pid>:<n>:<m> that
 * only fi_close removes. A process that exits without closing (a rank that fails and
 * calls exit, a C program that returns from main with the runtime still open) would leave
 * it behind: at exit, this process's own files go. (The mappings stay valid until the
 * process is gone; a killed process cannot run this: `titus launch` removes what its
 * ranks left.) */
static void unlink_own_shm(void) {
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "%ld:", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, (size_t)n)) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

int tofi_open(const char *prov, const char *iface, size_t nsegs, void *const *bases, const uint64_t *lens,
              size_t nslots, size_t nrecv, tofi **out, char *err, size_t errlen) {
    int ret;
    if (!lf_ready()) {
        if (err && errlen) snprintf(err, errlen, "%s", lf_error);
        return -FI_ENOSYS;
    }
    tofi *h = calloc(1, sizeof *h);
    if (!h) return -FI_ENOMEM;
    struct fi_info *hints = hints_for(prov);
    if (!hints) {
        free(h);
        return -FI_ENOMEM;
    }
    ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &h->info);
    fi_freeinfo(hints);
    if (ret) {
        msg(err, errlen, "fi_getinfo (no provider offers RDM endpoints with RMA and atomics)", ret);
        free(h);
        return ret;
    }
    char names[256];
    struct fi_info *fi = choose(h->info, iface, names, sizeof names);
    if (!fi) {
        if (err && errlen)
            snprintf(err, errlen, "TITUS_IFACE=%s: provider %s offers no such interface (it offers: %s)", iface,
                     h->info->fabric_attr->prov_name, names);
        fi_freeinfo(h->info);
        free(h);
        return -FI_ENODATA;
    }
    h->fi = fi;
    if (!strcmp(fi->fabric_attr->prov_name, "shm")) {
        static int registered;
        if (!__atomic_exchange_n(&registered, 1, __ATOMIC_ACQ_REL)) atexit(unlink_own_shm);
    }
    snprintf(h->prov, sizeof h->prov, "%s", fi->fabric_attr->prov_name);
    uint64_t mode = fi->domain_attr->mr_mode;
    if (mode & FI_MR_VIRT_ADDR) h->caps |= TOFI_CAP_VIRT_ADDR;
    if (mode & FI_MR_PROV_KEY) h->caps |= TOFI_CAP_PROV_KEY;
    if (mode & FI_MR_ENDPOINT) h->caps |= TOFI_CAP_MR_ENDPOINT;
    if (mode & FI_MR_LOCAL) h->caps |= TOFI_CAP_MR_LOCAL;
    if (fi->domain_attr->data_progress == FI_PROGRESS_MANUAL) h->caps |= TOFI_CAP_MANUAL_PROGRESS;
    if (fi->tx_attr->msg_order & FI_ORDER_SAW) h->caps |= TOFI_CAP_ORDERED_SAW;
    if (reach(fi) == 0) h->caps |= TOFI_CAP_LOOPBACK;

    if ((ret = fi_fabric(fi->fabric_attr, &h->fabric, NULL))) { msg(err, errlen, "fi_fabric", ret); goto fail; }
    if ((ret = fi_domain(h->fabric, fi, &h->domain, NULL))) { msg(err, errlen, "fi_domain", ret); goto fail; }

    /* Atomics must be valid for 64-bit words: checked here, not at the first steal. */
    struct fi_atomic_attr aattr; /* some providers (sockets) write it unconditionally */
    if ((ret = fi_query_atomic(h->domain, FI_UINT64, FI_CSWAP, &aattr, FI_COMPARE_ATOMIC)) ||
        (ret = fi_query_atomic(h->domain, FI_UINT64, FI_SUM, &aattr, FI_FETCH_ATOMIC))) {
        msg(err, errlen, "64-bit compare-swap and fetch-add (fi_query_atomic)", ret);
        goto fail;
    }

    struct fi_cq_attr cq_attr = {0};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    cq_attr.size = nslots + nrecv + 64;
    ret = fi_cq_open(h->domain, &cq_attr, &h->cq, NULL);
    if (ret == 0) {
        /* Block in fi_cq_sread only where the CQ has a wait fd: shm's sread (1.17) has none
         * and ignores its timeout, hanging until an event. */
        int fd = -1;
        if (fi_control(&h->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) h->caps |= TOFI_CAP_CQ_WAIT;
    } else {
        /* No wait object: tofi_poll sleeps between reads instead. */
        cq_attr.wait_obj = FI_WAIT_NONE;
        if ((ret = fi_cq_open(h->domain, &cq_attr, &h->cq, NULL))) { msg(err, errlen, "fi_cq_open", ret); goto fail; }
    }
    struct fi_av_attr av_attr = {0};
    av_attr.type = FI_AV_TABLE;
    if ((ret = fi_av_open(h->domain, &av_attr, &h->av, NULL))) { msg(err, errlen, "fi_av_open", ret); goto fail; }
    if ((ret = fi_endpoint(h->domain, fi, &h->ep, NULL))) { msg(err, errlen, "fi_endpoint", ret); goto fail; }
    if ((ret = fi_ep_bind(h->ep, &h->cq->fid, FI_TRANSMIT | FI_RECV))) { msg(err, errlen, "fi_ep_bind(cq)", ret); goto fail; }
    if ((ret = fi_ep_bind(h->ep, &h->av->fid, 0))) { msg(err, errlen, "fi_ep_bind(av)", ret); goto fail; }
    if ((ret = fi_enable(h->ep))) { msg(err, errlen, "fi_enable", ret); goto fail; }

    h->nsegs = nsegs;
    h->mrs = calloc(nsegs, sizeof *h->mrs);
    h->keys = calloc(nsegs, sizeof *h->keys);
    h->bases = calloc(nsegs, sizeof *h->bases);
    h->ptrs = calloc(nsegs, sizeof *h->ptrs);
    h->descs = calloc(nsegs, sizeof *h->descs);
    h->nslots = nslots;
    h->slots = calloc(nslots, sizeof *h->slots);
    h->nrecv = nrecv;
    h->recvs = calloc(nrecv, sizeof *h->recvs);
    if (!h->mrs || !h->keys || !h->bases || !h->ptrs || !h->descs || !h->slots || !h->recvs) { ret = -FI_ENOMEM; msg(err, errlen, "calloc", ret); goto fail; }
    /* Application keys: segment i gets key i + 1; the temporaries take the next two. */
    for (size_t i = 0; i < nsegs; i++) {
        if ((ret = reg(h, bases[i], lens[i], i + 1, &h->mrs[i], &h->descs[i], err, errlen))) goto fail;
        h->keys[i] = fi_mr_key(h->mrs[i]);
        h->bases[i] = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)bases[i] : 0;
        h->ptrs[i] = (char *)bases[i];
    }
    if ((ret = reg(h, h->slots, nslots * sizeof *h->slots, nsegs + 1, &h->slots_mr, &h->slots_desc, err, errlen))) goto fail;
    if ((ret = reg(h, h->recvs, nrecv * sizeof *h->recvs, nsegs + 2, &h->recvs_mr, &h->recvs_desc, err, errlen))) goto fail;
    for (size_t i = 0; i < nrecv; i++) {
        ret = fi_recv(h->ep, h->recvs[i].msg, sizeof h->recvs[i].msg, h->recvs_desc, FI_ADDR_UNSPEC, &h->recvs[i].fctx);
        if (ret) { msg(err, errlen, "fi_recv", ret); goto fail; }
    }
    /* Remote atomics on providers without a wait fd (shm) run in this rank's progress and
     * leave no completion here to wake it: the cap bounds their latency, at an idle cost
     * of one wake-up per cap (1 ms: well under 1% of a core; 20 µs: ~20%). The
     * application shortens it while it expects remote operations (tofi_set_max_nap). */
    h->max_idle_ns = 1000000;
    const char *cap = getenv("TITUS_PROGRESS_MAX_SLEEP_US");
    if (cap && atol(cap) > 0) h->max_idle_ns = atol(cap) * 1000;
    *out = h;
    return 0;
fail:
    tofi_close(h);
    return ret ? ret : -FI_EOTHER;
}

void tofi_close(tofi *h) {
    if (!h) return;
    if (h->ep) fi_close(&h->ep->fid);
    for (size_t i = 0; h->mrs && i < h->nsegs; i++)
        if (h->mrs[i]) fi_close(&h->mrs[i]->fid);
    if (h->slots_mr) fi_close(&h->slots_mr->fid);
    if (h->recvs_mr) fi_close(&h->recvs_mr->fid);
    if (h->av) fi_close(&h->av->fid);
    if (h->cq) fi_close(&h->cq->fid);
    if (h->domain) fi_close(&h->domain->fid);
    if (h->fabric) fi_close(&h->fabric->fid);
    if (h->info) fi_freeinfo(h->info);
    free(h->mrs); free(h->keys); free(h->bases); free(h->ptrs); free(h->descs); free(h->slots); free(h->recvs);
    free(h);
}

const char *tofi_provider(const tofi *h) { return h->prov; }
uint32_t tofi_caps(const tofi *h) { return h->caps; }
size_t tofi_iov_limit(const tofi *h) { return h->fi->tx_attr->iov_limit; }

int tofi_getname(tofi *h, void *buf, size_t *len) { return fi_getname(&h->ep->fid, buf, len); }

void tofi_segment(const tofi *h, size_t seg, uint64_t *key, uint64_t *base) {
    *key = h->keys[seg];
    *base = h->bases[seg];
}

int tofi_av_insert(tofi *h, const void *addr, uint64_t *fi_addr) {
    fi_addr_t a;
    int ret = fi_av_insert(h->av, addr, 1, &a, 0, NULL);
    if (ret != 1) return ret < 0 ? ret : -FI_EINVAL;
    *fi_addr = a;
    return 0;
}

static void *local(tofi *h, size_t seg, uint64_t off) {
    /* Bounds were checked by the Rust side against the registered length. */
    return h->ptrs[seg] + off;
}

int tofi_read(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, size_t lseg, uint64_t loff, uint64_t len,
              uint64_t raddr, uint64_t rkey) {
    struct slot *s = &h->slots[slot];
    s->opid = opid;
    return fi_read(h->ep, local(h, lseg, loff), len, h->descs[lseg], peer, raddr, rkey, &s->fctx);
}

int tofi_writev(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, size_t n, const size_t *lsegs,
                const uint64_t *loffs, const uint64_t *lens, uint64_t raddr, uint64_t rkey, int delivery_complete) {
    struct slot *s = &h->slots[slot];
    s->opid = opid;
    /* One piece, no delivery completion: fi_write, the providers' fast path (rxm sends small
     * writes inline there, not through the generic message path). */
    if (n == 1 && !delivery_complete)
        return fi_write(h->ep, local(h, lsegs[0], loffs[0]), lens[0], h->descs[lsegs[0]], peer, raddr, rkey, &s->fctx);
    struct iovec iov[64];
    void *desc[64];
    uint64_t total = 0;
    if (n > 64) return -FI_EINVAL;
    for (size_t i = 0; i < n; i++) {
        iov[i].iov_base = local(h, lsegs[i], loffs[i]);
        iov[i].iov_len = lens[i];
        desc[i] = h->descs[lsegs[i]];
        total += lens[i];
    }
    struct fi_rma_iov rma = {.addr = raddr, .len = total, .key = rkey};
    struct fi_msg_rma m = {
        .msg_iov = iov, .desc = desc, .iov_count = n, .addr = peer, .rma_iov = &rma, .rma_iov_count = 1,
        .context = &s->fctx, .data = 0};
    return fi_writemsg(h->ep, &m, FI_COMPLETION | (delivery_complete ? FI_DELIVERY_COMPLETE : 0));
}

int tofi_cas(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t raddr, uint64_t rkey, uint64_t expected,
             uint64_t desired) {
    struct slot *s = &h->slots[slot];
    s->opid = opid;
    s->operand = desired;
    s->compare = expected;
    return fi_compare_atomic(h->ep, &s->operand, 1, h->slots_desc, &s->compare, h->slots_desc, &s->result,
                             h->slots_desc, peer, raddr, rkey, FI_UINT64, FI_CSWAP, &s->fctx);
}

int tofi_fadd(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t raddr, uint64_t rkey, uint64_t delta) {
    struct slot *s = &h->slots[slot];
    s->opid = opid;
    s->operand = delta;
    return fi_fetch_atomic(h->ep, &s->operand, 1, h->slots_desc, &s->result, h->slots_desc, peer, raddr, rkey,
                           FI_UINT64, FI_SUM, &s->fctx);
}

int tofi_signal(tofi *h, uint32_t slot, uint64_t opid, uint64_t peer, uint64_t from, uint64_t value) {
    struct slot *s = &h->slots[slot];
    s->opid = opid;
    s->operand = from;
    s->compare = value;
    return fi_send(h->ep, &s->operand, 2 * sizeof(uint64_t), h->slots_desc, peer, &s->fctx);
}

static int is_recv(tofi *h, void *ctx) {
    return (char *)ctx >= (char *)h->recvs && (char *)ctx < (char *)(h->recvs + h->nrecv);
}

/* Turns one completion into an event; reposts receive buffers. */
static void convert(tofi *h, void *ctx, tofi_event *e) {
    if (is_recv(h, ctx)) {
        struct recv_slot *r = (struct recv_slot *)ctx;
        e->kind = TOFI_SIGNAL;
        e->from = r->msg[0];
        e->value = r->msg[1];
        e->opid = 0;
        e->err = 0;
        int ret;
        do {
            ret = fi_recv(h->ep, r->msg, sizeof r->msg, h->recvs_desc, FI_ADDR_UNSPEC, &r->fctx);
        } while (ret == -FI_EAGAIN);
        return;
    }
    struct slot *s = (struct slot *)ctx;
    e->kind = TOFI_DONE;
    e->opid = s->opid;
    e->value = s->result;
    e->from = 0;
    e->err = 0;
}

int tofi_poll(tofi *h, tofi_event *ev, size_t n, int timeout_ms) {
    struct fi_cq_data_entry entries[64];
    if (n > 64) n = 64;
    if (n == 0) return 0;
    ssize_t got;
    struct timespec start = {0, 0};
    if (timeout_ms > 0) clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (timeout_ms > 0 && (h->caps & TOFI_CAP_CQ_WAIT))
            got = fi_cq_sread(h->cq, entries, n, NULL, timeout_ms);
        else
            got = fi_cq_read(h->cq, entries, n);
        if (got > 0) {
            h->idle_ns = 0;
            for (ssize_t i = 0; i < got; i++) convert(h, entries[i].op_context, &ev[i]);
            return (int)got;
        }
        if (got == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            ssize_t r = fi_cq_readerr(h->cq, &err, 0);
            if (r < 0) return (int)r;
            if (is_recv(h, err.op_context)) {
                /* A failed receive (peer gone): repost the buffer, report nothing. */
                struct recv_slot *rs = (struct recv_slot *)err.op_context;
                fi_recv(h->ep, rs->msg, sizeof rs->msg, h->recvs_desc, FI_ADDR_UNSPEC, &rs->fctx);
                return 0;
            }
            struct slot *s = (struct slot *)err.op_context;
            ev[0].kind = TOFI_ERROR;
            ev[0].opid = s ? s->opid : 0;
            ev[0].err = err.err ? err.err : FI_EOTHER;
            ev[0].value = (uint64_t)(int64_t)err.prov_errno;
            ev[0].from = 0;
            return 1;
        }
        /* fi_cq_signal (tofi_wake) ends a blocked sread with -FI_ECANCELED on some
         * providers (sockets): a wake-up, not an error. */
        if (got == -FI_ECANCELED) return 0;
        if (got != -FI_EAGAIN) return (int)got;
        if (timeout_ms <= 0 || (h->caps & TOFI_CAP_CQ_WAIT)) return 0;
        if (__atomic_exchange_n(&h->woken, 0, __ATOMIC_ACQ_REL)) return 0;
        /* No wait fd: sleep between reads, 10 µs doubling to the cap while nothing comes,
         * back to 10 µs as soon as an event does. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms >= timeout_ms) return 0;
        /* The default 50 µs timer slack would stretch every nap: ask for 2 µs (per thread,
         * idempotent). */
        prctl(PR_SET_TIMERSLACK, 2000UL, 0, 0, 0);
        long cap_ns = __atomic_load_n(&h->max_idle_ns, __ATOMIC_RELAXED);
        h->idle_ns = h->idle_ns < 10000 ? 10000 : h->idle_ns * 2;
        if (h->idle_ns > cap_ns) h->idle_ns = cap_ns;
        struct timespec nap = {0, h->idle_ns};
        nanosleep(&nap, NULL);
    }
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int tofi_raw_latency(tofi *h, int kind, uint64_t peer, size_t lseg, uint64_t len, uint64_t raddr, uint64_t rkey,
                     size_t iters, uint64_t *ns) {
    struct slot *s = &h->slots[0];
    struct fi_cq_data_entry e;
    for (size_t i = 0; i < iters; i++) {
        uint64_t t0 = now_ns();
        int ret;
        do {
            switch (kind) {
            case 0:
                s->operand = i + 1;
                s->compare = i;
                ret = fi_compare_atomic(h->ep, &s->operand, 1, h->slots_desc, &s->compare, h->slots_desc, &s->result,
                                        h->slots_desc, peer, raddr, rkey, FI_UINT64, FI_CSWAP, &s->fctx);
                break;
            case 1:
                s->operand = 1;
                ret = fi_fetch_atomic(h->ep, &s->operand, 1, h->slots_desc, &s->result, h->slots_desc, peer, raddr,
                                      rkey, FI_UINT64, FI_SUM, &s->fctx);
                break;
            case 2:
                ret = fi_read(h->ep, local(h, lseg, 0), len, h->descs[lseg], peer, raddr, rkey, &s->fctx);
                break;
            default:
                ret = fi_write(h->ep, local(h, lseg, 0), len, h->descs[lseg], peer, raddr, rkey, &s->fctx);
                break;
            }
            if (ret == -FI_EAGAIN) fi_cq_read(h->cq, &e, 0);
        } while (ret == -FI_EAGAIN);
        if (ret) return ret;
        for (;;) {
            ssize_t got = fi_cq_read(h->cq, &e, 1);
            if (got == 1) {
                if (e.op_context == &s->fctx) break;
                continue; /* a signal receive: the benchmark sends none */
            }
            if (got == -FI_EAVAIL) {
                struct fi_cq_err_entry err = {0};
                fi_cq_readerr(h->cq, &err, 0);
                return -(err.err ? err.err : FI_EOTHER);
            }
        }
        ns[i] = now_ns() - t0;
    }
    return 0;
}
