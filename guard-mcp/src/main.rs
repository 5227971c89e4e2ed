//! guard-mcp: an MCP server on stdio whose tools are the ones guardd lets its caller run. The
//! list comes from guardd (`tools`), each call goes to guardd (`exec`) like any other, and a
//! policy reload reaches the client as `notifications/tools/list_changed`. guard-mcp decides
//! nothing itself: without guardd, it lists no tool and every call is an error result.

mod call;
#[cfg(test)]
mod fixtures;
mod params;
mod release;
mod roots;
mod schema;
mod stdio;

use std::{
    io::IsTerminal as _,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use guard::{
    client::{self, Client},
    protocol::{self, Reply, Request, ToolsRequest, reply::ToolList},
};
use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler, ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// How long to wait before trying guardd again when the reload feed is down.
const RECONNECT: Duration = Duration::from_secs(1);

#[derive(Parser)]
#[command(
    name = "guard-mcp",
    version,
    about = "An MCP server (stdio) for the tools guardd lets you run, each call confined by guard",
    after_help = guard::client::cli::BOOK_HELP
)]
struct Cli {
    /// guardd's socket.
    #[arg(long, env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    /// What a call held for a human's review answers: `release`, at once, with its id, for the
    /// model to fetch its result with `retrieve_quarantined_tool_response` once approved; or
    /// `wait`, when approved and run, the request kept open with progress notifications
    /// meanwhile (a client's request timeout ends the wait and withdraws the call).
    #[arg(long, value_enum, default_value_t = Held::Release)]
    held: Held,
}

/// [`Cli::held`].
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Held {
    Release,
    Wait,
}

/// The server: guardd's socket, the client's roots, and guardd's tool list as its feed keeps it.
#[derive(Clone)]
struct Guard {
    socket: Arc<PathBuf>,
    roots: Arc<roots::Roots>,
    followed: Followed,
    /// The session's held calls, when they are released rather than waited for.
    releases: Option<Arc<release::Releases>>,
}

/// The tool list guardd's feed ([`follow`]) last gave, while it is connected: a call's
/// arguments are checked against it without asking guardd for the list each time.
type Followed = Arc<Mutex<Option<Arc<ToolList>>>>;

impl Guard {
    /// The tools guardd lists for us now.
    fn listing(&self) -> Result<ToolList, String> {
        let mut client = Client::connect(&self.socket)
            .map_err(|e| format!("guardd unreachable at {}: {e}", self.socket.display()))?;
        match client.request(&Request::Tools(ToolsRequest::default())) {
            Ok(Reply::Tools(list)) => Ok(list),
            Ok(other) => Err(client::unexpected(&other).to_string()),
            Err(e) => Err(format!("guardd: {e}")),
        }
    }

    /// Checks a call of `tool` with `args` against the followed list, and where that refuses
    /// it (or there is none) against a listing asked for now: a list a reload changed a moment
    /// ago never refuses a call. Without a listing (guardd unreachable) the call goes on, to
    /// fail as it does then.
    async fn check(&self, tool: &str, args: &JsonObject) -> Result<(), params::Malformed> {
        let followed = self
            .followed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if followed.is_some_and(|list| params::check(&list, tool, args).is_ok()) {
            return Ok(());
        }
        match &self.fetch().await.map_err(params::Malformed::Tool)? {
            Ok(list) => params::check(list, tool, args),
            Err(_) => Ok(()),
        }
    }

    /// [`Guard::listing`], off the runtime's thread.
    async fn fetch(&self) -> Result<Result<ToolList, String>, ErrorData> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.listing())
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

impl ServerHandler for Guard {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let mut info = ServerConfig::new(capabilities).with_instructions(
            "Each tool runs through guard: guardd decides the call against its policy, records \
             it in an audit log and runs it confined. A refused call is an error result.",
        );
        info.server_info = Implementation::new("guard-mcp", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = match self.fetch().await? {
            Ok(list) => {
                let offered = list.tools.iter().filter(|t| params::offered(t));
                let mut tools: Vec<_> = offered.map(schema::tool).collect();
                if let Some(releases) = &self.releases {
                    tools.retain(|t| released_apart(&t.name));
                    tools.push(releases.tool());
                }
                tools
            }
            // Fail closed: no guardd, no tools; the client's log says why.
            Err(e) => {
                tracing::warn!("{e}; listing no tools");
                Vec::new()
            }
        };
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let progress = call::Progress {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
        };
        let args = request.arguments.unwrap_or_default();
        let tool = request.name.into_owned();
        if let Some(releases) = self.releases.as_ref().filter(|_| tool == release::TOOL) {
            let cancel = context.ct.cancelled();
            return Ok(releases.retrieve(&args, cancel).await.into());
        }
        match self.check(&tool, &args).await {
            Ok(()) => {}
            Err(params::Malformed::Tool(e)) => return Err(e),
            // The model corrects what it sent: a result it reads, not a protocol error.
            Err(params::Malformed::Arguments(why)) => return Ok(call::malformed(why).into()),
        }
        let cwd = self.roots.cwd(&context.peer).await;
        let cancel = context.ct.cancelled();
        let (on_hold, no_wait) = match &self.releases {
            Some(_) => (call::OnHold::Answer, true),
            None => (call::OnHold::Wait(progress), false),
        };
        let request = call::exec(tool.clone(), args, cwd, no_wait);
        let result = match call::run(&self.socket, &request, on_hold, cancel).await {
            call::Ran::Done(result) => result,
            call::Ran::Held(hold) => match &self.releases {
                Some(releases) => releases.held(tool, &hold),
                None => unreachable!("only OnHold::Answer returns a hold"),
            },
        };
        Ok(result.into())
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        self.roots.forget();
    }
}

/// Follows guardd's tool list (`tools` with `follow`) and tells the client when it changes:
/// after a reload, and when guardd goes away or comes back. `known` is the list the client
/// saw last (`None` before the first: the client lists the tools itself after initialising).
async fn follow(socket: Arc<PathBuf>, peer: Peer<RoleServer>, followed: Followed) {
    let mut known: Option<ToolList> = None;
    loop {
        if let Err(e) = feed(&socket, &peer, &mut known, &followed).await {
            tracing::debug!("tool feed: {e}");
        }
        // What is not followed any more is asked for again at each call.
        *followed.lock().unwrap_or_else(PoisonError::into_inner) = None;
        // guardd is gone: the client's calls now fail, and it lists no tool until guardd is back.
        let had = known.replace(ToolList { tools: Vec::new() });
        if had.is_some_and(|l| !l.tools.is_empty()) && !notify(&peer).await {
            return;
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// One connection's worth of lists, each recorded in `known` (and `followed`) and told when it
/// changed.
async fn feed(
    socket: &PathBuf,
    peer: &Peer<RoleServer>,
    known: &mut Option<ToolList>,
    followed: &Followed,
) -> std::io::Result<()> {
    let mut stream = tokio::net::UnixStream::connect(socket).await?;
    let request = Request::Tools(ToolsRequest { follow: true });
    stream.write_all(&protocol::frame(&request)).await?;
    let mut lines = BufReader::new(stream).lines();
    while let Some(line) = lines.next_line().await? {
        let list = match protocol::parse_reply::<Reply>(line.as_bytes()) {
            Ok(Reply::Tools(list)) => list,
            // guardd is there, and the list as it was.
            Ok(Reply::Keepalive(_)) => continue,
            Ok(other) => return Err(std::io::Error::other(format!("{other:?}"))),
            Err(e) => return Err(std::io::Error::other(e)),
        };
        let changed = known.as_ref().is_some_and(|l| l != &list);
        *followed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(list.clone()));
        *known = Some(list);
        if changed && !notify(peer).await {
            return Ok(());
        }
    }
    Ok(())
}

/// Whether a tool of guardd's keeps its name beside the release tool: one of the policy's
/// named as it is would be shadowed, and is not offered (guardd still decides it if called
/// through another client).
fn released_apart(name: &str) -> bool {
    if name == release::TOOL {
        tracing::warn!(
            "the policy's tool {name} is not offered: guard-mcp's release tool has its name"
        );
        return false;
    }
    true
}

/// `notifications/tools/list_changed`; false when the client is gone.
async fn notify(peer: &Peer<RoleServer>) -> bool {
    peer.notify_tool_list_changed().await.is_ok()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // stdout is the protocol's: the log goes to stderr, which MCP clients keep.
    // Colour codes only for a terminal: MCP clients keep the log as text.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GUARD_MCP_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    guard::client::cli::generate_if_asked(<Cli as clap::CommandFactory>::command);
    let cli = Cli::parse();
    let socket = Arc::new(client::socket_path(cli.socket));
    let releases =
        (cli.held == Held::Release).then(|| Arc::new(release::Releases::new(Arc::clone(&socket))));
    let server = Guard {
        socket: Arc::clone(&socket),
        roots: Arc::default(),
        followed: Followed::default(),
        releases: releases.clone(),
    };
    let followed = Arc::clone(&server.followed);
    let running = server
        .serve(stdio::transport().context("guard-mcp's stdio")?)
        .await
        .context("MCP initialisation on stdio")?;
    if let Some(releases) = &releases {
        releases.tell(running.peer().clone());
    }
    let feed = tokio::spawn(follow(socket, running.peer().clone(), followed));
    let quit = running.waiting().await;
    feed.abort();
    quit.context("MCP service")?;
    Ok(())
}
