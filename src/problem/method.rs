//! What a user asks to run ([`Method`]): a chain algorithm or a graph-only
//! one, the one vocabulary of `--algorithm` and of [`super::solve`]. It lives
//! here, above both kinds of solver, so that the chain solvers know nothing
//! of graphs and the graph solvers nothing of chains' algorithms.

use std::fmt;
use std::str::FromStr;

use crate::graph::GraphAlgorithm;
use crate::solve::Algorithm;

/// What a user asks to run: a chain algorithm (which a forward graph that is
/// a path also takes, and `auto` and `exhaustive` on any graph), or a
/// graph-only one. The command line's `--algorithm` parses into this.
///
/// # Examples
///
/// ```
/// use remat::Algorithm;
/// use remat::graph::GraphAlgorithm;
/// use remat::problem::Method;
///
/// assert_eq!("auto".parse::<Method>()?, Method::Chain(Algorithm::Auto));
/// assert_eq!("checkmate".parse::<Method>()?, Method::Graph(GraphAlgorithm::Checkmate));
/// assert_eq!(Method::from(Algorithm::Floating).to_string(), "floating");
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// A chain algorithm.
    Chain(Algorithm),
    /// A graph-only algorithm (`checkmate`, `checkmate-approx`).
    Graph(GraphAlgorithm),
}

impl Method {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Method::Chain(a) => a.name(),
            Method::Graph(g) => g.name(),
        }
    }

    /// Parses `name` where only a chain algorithm will do (`remat
    /// min-memory`, the Python functions that take a chain): a chain
    /// algorithm is returned; a graph-only one (`checkmate`,
    /// `checkmate-approx`) is an error that says so and what to run instead;
    /// any other name is [`Algorithm`]'s error, listing the chain algorithms.
    /// The one place that tells the two kinds of names apart.
    ///
    /// # Examples
    ///
    /// ```
    /// use remat::Algorithm;
    /// use remat::problem::Method;
    ///
    /// assert_eq!(Method::chain_algorithm("floating")?, Algorithm::Floating);
    /// // A graph algorithm is not a chain algorithm: the error says what to use.
    /// let e = Method::chain_algorithm("checkmate").unwrap_err();
    /// assert!(e.contains("checkmate solves graphs, not chains"), "{e}");
    /// let e = Method::chain_algorithm("fastest").unwrap_err();
    /// assert!(e.starts_with("unknown algorithm `fastest`; expected one of: "), "{e}");
    /// # Ok::<(), String>(())
    /// ```
    pub fn chain_algorithm(name: &str) -> Result<Algorithm, String> {
        match name.parse::<Method>() {
            Ok(Method::Chain(algorithm)) => Ok(algorithm),
            Ok(Method::Graph(g)) => Err(format!(
                "{g} solves graphs, not chains; solve the chain's forward graph instead \
                 (`remat::problem::solve` does, as `remat solve` does)"
            )),
            Err(_) => name.parse::<Algorithm>(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;

    /// Parses any name `--algorithm` takes: the chain algorithms' and the
    /// graph-only ones'. An unknown name's error lists them all.
    fn from_str(s: &str) -> Result<Method, String> {
        if let Ok(g) = s.parse::<GraphAlgorithm>() {
            return Ok(Method::Graph(g));
        }
        s.parse::<Algorithm>().map(Method::Chain).map_err(|_| {
            let names: Vec<&str> = Algorithm::ALL
                .iter()
                .map(|a| a.name())
                .chain(GraphAlgorithm::GRAPH_ONLY.iter().map(|g| g.name()))
                .collect();
            format!("unknown algorithm `{s}`; expected one of: {}", names.join(", "))
        })
    }
}

impl From<Algorithm> for Method {
    fn from(a: Algorithm) -> Method {
        Method::Chain(a)
    }
}

impl From<GraphAlgorithm> for Method {
    fn from(g: GraphAlgorithm) -> Method {
        Method::Graph(g)
    }
}
