// Sequential incremental push-relabel matching, written the way the official C++ code runs it.
//
// Paper: "Efficient Algorithms for Incremental Metric Bipartite Matching", ICLR 2026
// (OpenReview wnIanx0r0w). Official code: github.com/ritesh-777/Incremental-Metric-Bipartite-
// Matching-Algorithm, Synthetic/PushRelabel.h (class OnlineDynamicMatching). This file is our
// own code, written from that code's logic (not its text), so that experiments.bench_matching
// can time the official algorithm on the very instances it gives jaxlab, in the same run.
// tests/matching/test_cpp_program.py checks that its final state (matching, duals at every
// level, levels, omega, doublings, push/relabel counts) equals tests/matching/cpp_reference.py,
// the plain-Python restatement that jaxlab's push-relabel follows step by step.
//
// Mode "official" keeps the official code's data structures and per-insertion work:
//   * a point is a std::vector<double> of coordinates; a server holds its point, a
//     std::vector<int> of duals (one per level 0..mu+1) and its holder; a request its point,
//     its duals and its level; a state is a std::vector of each and omega;
//   * every arrival copies the committed state into a working one, inserts there (doubling
//     omega and re-inserting everything while the level-count check fails, the check run
//     before each attempt and after it, as the official do-while does) and copies the working
//     state back;
//   * scaled costs are recomputed for every server at every scan, recursively from level 0,
//     each level's divisor 2 (1 + eps)^2 n^phi(l) from std::pow at each use; y_max(l) also from
//     std::pow at each use;
//   * a scan runs over servers in index order and stops at the first admissible free server.
// Mode "flat" runs the same algorithm (the same arithmetic, so the same trajectory) on flat
// arrays: per-level constants computed once, no state copies, the check once per attempt. It
// shows what a lean sequential C++ implementation of this algorithm costs.
//
// What differs from the official code (both modes):
//   * no exact tail: the official code hands the last 50 arrivals (from the moment exactly 50
//     servers are free) to an exact online solver, and reloads those 50 servers on every later
//     arrival (a defect: a server can be used twice). Here, as in cpp_reference.py and in
//     jaxlab's insert_many without exact_tail, every arrival is placed by push-relabel;
//   * where the official code calls exit(0) (a dual reaching y_max at the top level mu + 1),
//     this program stops and reports the arrival ("status overflow <i>");
//   * no per-arrival printing, no timers inside an insertion (one clock read per arrival);
//   * mu, delta and eps come from the input (the official code fixes eps = 0.2 and derives
//     mu = 5 from delta = 0.001).
// Build: c++ -O2 -std=c++17 -ffp-contract=off (the official build, g++ -std=c++20, is ISO C++
// too and so does not contract a*b + c into fused multiply-adds either; -ffp-contract=off keeps
// the distances bit-identical to Python's on every target).
//
// Input (stdin, native byte order): int64 n, k, dim, mu, repeats, mode (0 official, 1 flat);
// float64 delta, eps; float64 servers[n][dim]; float64 requests[k][dim].
// Output (stdout, text, one item per line, from the last repeat):
//   status ok | status overflow <arrival index>
//   omega, restarts, cost (sum of matched distances, in server order as the official code),
//   counters (pushes_free, pushes_matched, relabels, moves_up, placements, scans,
//   servers_scanned), seconds (one per repeat: all k arrivals), arrival_seconds (cumulative
//   time after each arrival), server_of (per request), level (per request),
//   request_duals (level-major, (mu + 2) x k), server_duals ((mu + 2) x n).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace {

struct Counters {
  long long pushes_free = 0, pushes_matched = 0, relabels = 0, moves_up = 0;
  long long placements = 0;  // request placements, re-insertions after a doubling included
  long long scans = 0;  // admissible-edge searches (one per push or relabel)
  long long servers_scanned = 0;  // servers visited by those searches (they stop early)
};

struct Overflow {};  // a dual passed y_max at the top level (the official code exits there)

struct Params {
  int n, dim, mu;
  double delta, eps;
};

double euclid(const double* a, const double* b, int dim) {
  double total = 0.0;
  for (int i = 0; i < dim; ++i) {
    double diff = a[i] - b[i];
    total += diff * diff;
  }
  return std::sqrt(total);
}

// ---------------------------------------------------------------------------------------------
// Mode "official": the official code's structures and per-arrival work.

struct Point {
  std::vector<double> coords;
  double distance(const Point& other) const {
    if (coords.size() != other.coords.size()) std::abort();  // the official code checks too
    return euclid(coords.data(), other.coords.data(), static_cast<int>(coords.size()));
  }
};

struct Server {
  Point location;
  std::vector<int> y;  // dual per level 0..mu+1
  int holder = -1;  // request index, -1 when free
};

struct Request {
  Point location;
  std::vector<int> y;
  int level = 0;
};

struct State {
  std::vector<Server> servers;
  std::vector<Request> requests;
  double omega = 1.0;
};

class OfficialMatcher {
 public:
  OfficialMatcher(const Params& p, const std::vector<Point>& servers, Counters* counters)
      : p_(p), counters_(counters) {
    for (const Point& s : servers) {
      Server srv;
      srv.location = s;
      srv.y.assign(p_.mu + 2, 0);
      committed_.servers.push_back(srv);
    }
  }

  // One arrival (the official match_request without its exact tail).
  void insert(const Point& location) {
    work_ = committed_;  // the official solutions[1] = solutions[0]
    do {
      if (!valid(work_)) {
        omega_ *= 2;
        ++restarts_;
        clear(work_);
        work_.omega = omega_;
        for (const Request& old : committed_.requests) place(work_, old.location);
        place(work_, location);
      } else {
        work_.omega = omega_;
        place(work_, location);
      }
    } while (!valid(work_));
    committed_ = work_;  // solutions[0] = solutions[1]
  }

  const State& state() const { return committed_; }
  double omega() const { return omega_; }
  long long restarts() const { return restarts_; }

 private:
  double phi(int i) const { return std::pow(3, i) * (2 * p_.delta); }
  double big_phi(int level) const {
    return std::ceil(((std::pow(3, level) - 1) / 2) * (2 * p_.delta));
  }
  double y_max(int level) const {
    return (25 / p_.eps) * std::pow(static_cast<double>(p_.n), phi(level));
  }

  double scaled(int level, const Point& s, const Point& r, double omega) const {
    const double n = static_cast<double>(p_.n);
    if (level == 0) return std::ceil(2 * s.distance(r) * n / (p_.eps * omega));
    return std::ceil(scaled(level - 1, s, r, omega) /
                     (2 * std::pow(1 + p_.eps, 2) * std::pow(n, phi(level - 1))));
  }

  bool valid(const State& st) const {
    int top = 0;
    for (const Request& r : st.requests) top = r.level > top ? r.level : top;
    for (int level = 0; level <= top; ++level) {
      double count = 0;
      for (const Request& r : st.requests) count += r.level >= level ? 1 : 0;
      double bound = std::pow(static_cast<double>(st.servers.size()), 1 - big_phi(level));
      if (count > bound) return false;
    }
    return true;
  }

  static void clear(State& st) {
    st.requests.clear();
    for (Server& s : st.servers) {
      s.holder = -1;
      std::fill(s.y.begin(), s.y.end(), 0);
    }
  }

  // The admissible-edge search: returns a free admissible server (stopping there), else the
  // first admissible eligible matched one (or -1), with the minimum eligible slack.
  int scan(State& st, int f, int level, double* min_slack) {
    const Request& r = st.requests[f];
    int matched = -1;
    double slack = std::numeric_limits<double>::max();
    ++counters_->scans;
    for (size_t s = 0; s < st.servers.size(); ++s) {
      const Server& srv = st.servers[s];
      ++counters_->servers_scanned;
      double d = scaled(level, srv.location, r.location, st.omega);
      bool eligible = srv.holder == -1 || level <= st.requests[srv.holder].level;
      if (eligible) slack = std::min(slack, d - r.y[level] - srv.y[level]);
      if (srv.y[level] + r.y[level] == d + 1.0) {
        if (srv.holder == -1) {
          *min_slack = slack;
          return static_cast<int>(s);
        }
        if (eligible && matched == -1) matched = static_cast<int>(s);
      }
    }
    *min_slack = slack;
    return matched;
  }

  void place(State& st, const Point& location) {
    ++counters_->placements;
    Request req;
    req.location = location;
    req.y.assign(p_.mu + 2, 0);
    int f = static_cast<int>(st.requests.size());
    st.requests.push_back(req);
    st.requests[f].y[0] = static_cast<int>(y_max(0));
    for (const Server& srv : st.servers) {
      int d = static_cast<int>(scaled(0, srv.location, location, st.omega));
      st.requests[f].y[0] = std::min(st.requests[f].y[0], d + 1 - srv.y[0]);
    }
    int level = 0;
    while (f != -1) {
      Request& rf = st.requests[f];
      if (rf.y[level] >= y_max(level)) {
        rf.y[level] = static_cast<int>(y_max(level));
        ++level;
        ++counters_->moves_up;
        if (level == p_.mu + 2) throw Overflow{};
        rf.level = level;
        continue;
      }
      double min_slack;
      int s = scan(st, f, level, &min_slack);
      if (s != -1) {
        Server& srv = st.servers[s];
        int evicted = srv.holder;
        srv.holder = f;
        srv.y[level] -= 1;
        if (evicted == -1) {
          ++counters_->pushes_free;
          f = -1;
        } else {
          ++counters_->pushes_matched;
          f = evicted;
          level = st.requests[f].level;
        }
      } else {
        rf.y[level] += static_cast<int>(min_slack) + 1;
        ++counters_->relabels;
      }
    }
  }

  Params p_;
  Counters* counters_;
  State committed_, work_;
  double omega_ = 1.0;
  long long restarts_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Mode "flat": the same algorithm and arithmetic on flat arrays, constants computed once.

class FlatMatcher {
 public:
  FlatMatcher(const Params& p, const double* servers, const double* requests, int k,
              Counters* counters)
      : p_(p), servers_(servers), requests_(requests), big_l_(p.mu + 2), counters_(counters),
        y_s_(static_cast<size_t>(big_l_) * p.n, 0), holder_(p.n, -1),
        y_r_(static_cast<size_t>(big_l_) * k, 0), level_(k, 0) {
    double n = static_cast<double>(p.n);
    for (int l = 0; l < big_l_; ++l) {
      double phi = std::pow(3, l) * (2 * p.delta);
      y_max_.push_back((25 / p.eps) * std::pow(n, phi));
      divisor_.push_back(2 * std::pow(1 + p.eps, 2) * std::pow(n, phi));
      bound_.push_back(std::pow(n, 1 - std::ceil(((std::pow(3, l) - 1) / 2) * (2 * p.delta))));
    }
  }

  void insert(int row) {
    place(row);
    while (!valid(row + 1)) {
      omega_ *= 2;
      ++restarts_;
      std::fill(y_s_.begin(), y_s_.end(), 0);
      std::fill(holder_.begin(), holder_.end(), -1);
      for (int i = 0; i <= row; ++i) place(i);
    }
  }

  double omega() const { return omega_; }
  long long restarts() const { return restarts_; }
  const std::vector<int>& holder() const { return holder_; }
  int level(int r) const { return level_[r]; }
  int y_r(int l, int r) const { return y_r_[static_cast<size_t>(r) * big_l_ + l]; }
  int y_s(int l, int s) const { return y_s_[static_cast<size_t>(l) * p_.n + s]; }

 private:
  double scaled(int level, int s, int r) const {
    double d = std::ceil(2 * euclid(servers_ + static_cast<size_t>(s) * p_.dim,
                                    requests_ + static_cast<size_t>(r) * p_.dim, p_.dim) *
                         static_cast<double>(p_.n) / (p_.eps * omega_));
    for (int l = 1; l <= level; ++l) d = std::ceil(d / divisor_[l - 1]);
    return d;
  }

  bool valid(int count) const {
    int top = 0;
    for (int r = 0; r < count; ++r) top = level_[r] > top ? level_[r] : top;
    for (int l = 0; l <= top; ++l) {
      double c = 0;
      for (int r = 0; r < count; ++r) c += level_[r] >= l ? 1 : 0;
      if (c > bound_[l]) return false;
    }
    return true;
  }

  void place(int row) {
    ++counters_->placements;
    int* yr = &y_r_[static_cast<size_t>(row) * big_l_];
    std::fill(yr, yr + big_l_, 0);
    level_[row] = 0;
    yr[0] = static_cast<int>(y_max_[0]);
    for (int s = 0; s < p_.n; ++s)
      yr[0] = std::min(yr[0], static_cast<int>(scaled(0, s, row)) + 1 - y_s_[s]);
    int f = row, level = 0;
    while (f != -1) {
      int& yf = y_r_[static_cast<size_t>(f) * big_l_ + level];
      if (yf >= y_max_[level]) {
        yf = static_cast<int>(y_max_[level]);
        ++level;
        ++counters_->moves_up;
        if (level == big_l_) throw Overflow{};
        level_[f] = level;
        continue;
      }
      int* ys = &y_s_[static_cast<size_t>(level) * p_.n];
      int matched = -1, found = -1;
      double slack = std::numeric_limits<double>::max();
      ++counters_->scans;
      for (int s = 0; s < p_.n; ++s) {
        ++counters_->servers_scanned;
        double d = scaled(level, s, f);
        int h = holder_[s];
        bool eligible = h == -1 || level <= level_[h];
        if (eligible) slack = std::min(slack, d - yf - ys[s]);
        if (ys[s] + yf == d + 1.0) {
          if (h == -1) {
            found = s;
            break;
          }
          if (eligible && matched == -1) matched = s;
        }
      }
      int s = found != -1 ? found : matched;
      if (s != -1) {
        int evicted = holder_[s];
        holder_[s] = f;
        ys[s] -= 1;
        if (evicted == -1) {
          ++counters_->pushes_free;
          f = -1;
        } else {
          ++counters_->pushes_matched;
          f = evicted;
          level = level_[f];
        }
      } else {
        yf += static_cast<int>(slack) + 1;
        ++counters_->relabels;
      }
    }
  }

  Params p_;
  const double* servers_;
  const double* requests_;
  int big_l_;
  Counters* counters_;
  std::vector<int> y_s_, holder_, y_r_, level_;
  std::vector<double> y_max_, divisor_, bound_;
  double omega_ = 1.0;
  long long restarts_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Driver.

bool read_all(void* dst, size_t bytes) { return std::fread(dst, 1, bytes, stdin) == bytes; }

template <typename T>
void print_list(const char* name, const std::vector<T>& values, const char* fmt) {
  std::printf("%s", name);
  for (const T& v : values) std::printf(fmt, v);
  std::printf("\n");
}

struct Outcome {
  bool overflowed = false;
  long long overflow_arrival = -1;
  double omega = 0, cost = 0;
  long long restarts = 0;
  std::vector<int> server_of, level, request_duals, server_duals;
};

}  // namespace

int main() {
  int64_t header[6];
  double floats[2];
  if (!read_all(header, sizeof header) || !read_all(floats, sizeof floats)) return 2;
  const int n = static_cast<int>(header[0]), k = static_cast<int>(header[1]);
  const int dim = static_cast<int>(header[2]), mu = static_cast<int>(header[3]);
  const int repeats = static_cast<int>(header[4]), mode = static_cast<int>(header[5]);
  if (n < 1 || k < 0 || k > n || dim < 1 || mu < 1 || repeats < 1 || mode < 0 || mode > 1)
    return 2;
  std::vector<double> servers(static_cast<size_t>(n) * dim), requests(static_cast<size_t>(k) * dim);
  if (!read_all(servers.data(), servers.size() * sizeof(double)) ||
      !read_all(requests.data(), requests.size() * sizeof(double)))
    return 2;
  const Params params{n, dim, mu, floats[0], floats[1]};
  const int big_l = mu + 2;

  std::vector<double> seconds, arrival_seconds(k, 0.0);
  Counters counters;
  Outcome out;
  for (int rep = 0; rep < repeats; ++rep) {
    counters = Counters();
    out = Outcome();
    using clock = std::chrono::steady_clock;
    if (mode == 0) {
      std::vector<Point> server_points(n), request_points(k);  // built outside the timing
      for (int s = 0; s < n; ++s)
        server_points[s].coords.assign(&servers[static_cast<size_t>(s) * dim],
                                       &servers[static_cast<size_t>(s + 1) * dim]);
      for (int r = 0; r < k; ++r)
        request_points[r].coords.assign(&requests[static_cast<size_t>(r) * dim],
                                        &requests[static_cast<size_t>(r + 1) * dim]);
      auto start = clock::now();
      OfficialMatcher m(params, server_points, &counters);
      int r = 0;
      try {
        for (; r < k; ++r) {
          m.insert(request_points[r]);
          arrival_seconds[r] = std::chrono::duration<double>(clock::now() - start).count();
        }
      } catch (const Overflow&) {
        out.overflowed = true;
        out.overflow_arrival = r;
      }
      seconds.push_back(std::chrono::duration<double>(clock::now() - start).count());
      const State& st = m.state();  // after an overflow: the state before that arrival
      const int count = static_cast<int>(st.requests.size());
      out.omega = m.omega();
      out.restarts = m.restarts();
      out.server_of.assign(count, -1);
      for (int s = 0; s < n; ++s) {
        int h = st.servers[s].holder;
        if (h != -1) {
          out.server_of[h] = s;
          out.cost += st.servers[s].location.distance(st.requests[h].location);
        }
      }
      for (int r = 0; r < count; ++r) out.level.push_back(st.requests[r].level);
      for (int l = 0; l < big_l; ++l) {
        for (int r = 0; r < count; ++r) out.request_duals.push_back(st.requests[r].y[l]);
        for (int s = 0; s < n; ++s) out.server_duals.push_back(st.servers[s].y[l]);
      }
    } else {
      auto start = clock::now();
      FlatMatcher m(params, servers.data(), requests.data(), k, &counters);
      int done = 0;
      try {
        for (int r = 0; r < k; ++r) {
          m.insert(r);
          done = r + 1;
          arrival_seconds[r] = std::chrono::duration<double>(clock::now() - start).count();
        }
      } catch (const Overflow&) {
        out.overflowed = true;  // the flat state is left mid-insertion: no state is reported
        out.overflow_arrival = done;
      }
      seconds.push_back(std::chrono::duration<double>(clock::now() - start).count());
      out.omega = m.omega();
      out.restarts = m.restarts();
      if (!out.overflowed) {
        out.server_of.assign(done, -1);
        for (int s = 0; s < n; ++s) {
          int h = m.holder()[s];
          if (h != -1) {
            out.server_of[h] = s;
            out.cost += euclid(&servers[static_cast<size_t>(s) * dim],
                               &requests[static_cast<size_t>(h) * dim], dim);
          }
        }
        for (int r = 0; r < done; ++r) out.level.push_back(m.level(r));
        for (int l = 0; l < big_l; ++l) {
          for (int r = 0; r < done; ++r) out.request_duals.push_back(m.y_r(l, r));
          for (int s = 0; s < n; ++s) out.server_duals.push_back(m.y_s(l, s));
        }
      }
    }
  }

  if (out.overflowed)
    std::printf("status overflow %lld\n", out.overflow_arrival);
  else
    std::printf("status ok\n");
  std::printf("omega %.17g\nrestarts %lld\ncost %.17g\n", out.omega, out.restarts, out.cost);
  std::printf("counters pushes_free %lld pushes_matched %lld relabels %lld moves_up %lld "
              "placements %lld scans %lld servers_scanned %lld\n",
              counters.pushes_free, counters.pushes_matched, counters.relabels, counters.moves_up,
              counters.placements, counters.scans, counters.servers_scanned);
  print_list("seconds", seconds, " %.9g");
  print_list("arrival_seconds", arrival_seconds, " %.9g");
  print_list("server_of", out.server_of, " %d");
  print_list("level", out.level, " %d");
  print_list("request_duals", out.request_duals, " %d");
  print_list("server_duals", out.server_duals, " %d");
  return 0;
}
