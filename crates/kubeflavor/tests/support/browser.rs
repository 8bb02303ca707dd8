//! A real browser for the tests: Debian's headless Chromium, driven over WebDriver through
//! Debian's chromium-driver (`apt-get install chromium chromium-driver`), with its own
//! profile and download folder, closed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// The driver and the browser session it runs.
pub struct Browser {
    pub client: Client,
    driver: Child,
    dir: tempfile::TempDir,
}

/// The WebDriver binary, installed by `testbed/browser/install` when missing.
fn driver_binary() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/browser/install");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run testbed/browser/install");
    assert!(
        out.status.success(),
        "the portal's browser tests need Chromium and its WebDriver, and testbed/browser/install could not provide them (see its message; on Debian: apt-get install chromium chromium-driver)"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Browser {
    /// A new browser; self-signed certificates are accepted (the test's own portal and
    /// provider), downloads land in [`Browser::downloads`].
    pub async fn start() -> Browser {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let downloads = dir.path().join("downloads");
        std::fs::create_dir(&downloads).expect("downloads folder");
        // A free port for the driver: bound, read and released (it binds it a moment later).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut driver = Command::new(driver_binary())
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        // The driver says when it listens: read its first line.
        {
            use std::io::BufRead;
            let out = driver.stdout.take().expect("driver stdout");
            let mut lines = std::io::BufReader::new(out).lines();
            let ready = lines
                .by_ref()
                .take(20)
                .any(|l| l.is_ok_and(|l| l.contains("started successfully")));
            assert!(ready, "chromedriver did not start");
            // Keep draining so the driver never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
        }
        let mut caps = serde_json::Map::new();
        caps.insert("acceptInsecureCerts".into(), json!(true));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=900,1100", "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", dir.path().join("profile").display()),
                ],
                "prefs": {
                    "download.default_directory": downloads.display().to_string(),
                    "download.prompt_for_download": false,
                },
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a browser session");
        Browser {
            client,
            driver,
            dir,
        }
    }

    /// Where downloads land.
    pub fn downloads(&self) -> PathBuf {
        self.dir.path().join("downloads")
    }

    /// The downloaded file `name`, once the browser has finished writing it (Chromium
    /// puts an empty `name` in place at once, writes `name.crdownload` and renames it over
    /// `name` when done). Bounded: a download that never comes fails the test after `limit`.
    pub async fn downloaded(&self, name: &str, limit: Duration) -> Vec<u8> {
        let path = self.downloads().join(name);
        let partial = self.downloads().join(format!("{name}.crdownload"));
        let wait = async {
            loop {
                if !partial.exists()
                    && let Ok(bytes) = std::fs::read(&path)
                    && !bytes.is_empty()
                {
                    return bytes;
                }
                // The browser writes on its own; nothing to await but the file system.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(limit, wait)
            .await
            .unwrap_or_else(|_| panic!("the download {name} did not arrive within {limit:?}"))
    }

    /// Saves a screenshot of the page as `name`.png under `dir`, when `dir` is set (the
    /// README's screenshots: `KUBEFLAVOR_E2E_SCREENSHOTS=docs/portal`).
    pub async fn screenshot(&self, dir: Option<&Path>, name: &str) {
        let Some(dir) = dir else { return };
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::create_dir_all(dir).expect("screenshot folder");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

impl Browser {
    /// The element `locator` finds, once the page shows it (within 30 s); a timeout fails
    /// the test with where the browser is and what the page says.
    pub async fn wait_for(
        &self,
        what: &str,
        locator: fantoccini::Locator<'_>,
    ) -> fantoccini::elements::Element {
        let found = tokio::time::timeout(
            Duration::from_secs(30),
            self.client.wait().for_element(locator),
        )
        .await;
        match found {
            Ok(Ok(element)) => element,
            other => {
                let url = self
                    .client
                    .current_url()
                    .await
                    .map(|u| u.to_string())
                    .unwrap_or_default();
                let text = match self.client.find(fantoccini::Locator::Css("body")).await {
                    Ok(body) => body.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                panic!(
                    "waiting for {what}: {}; the browser is at {url}, showing:\n{}",
                    match other {
                        Ok(Err(e)) => e.to_string(),
                        _ => "not there within 30 s".into(),
                    },
                    text.chars().take(2000).collect::<String>()
                );
            }
        }
    }

    /// Signs `user` in at the portal on `origin` through the identity provider's own login
    /// page (glewlwyd's: user name, password, OK, then Continue to the client), and waits for
    /// the portal's node form. `shots`: where to save screenshots of the pages on the way.
    pub async fn sign_in(&self, origin: &str, user: &str, password: &str, shots: Option<&Path>) {
        use fantoccini::Locator;
        let c = &self.client;
        c.goto(&format!("{origin}/"))
            .await
            .expect("open the portal");
        self.screenshot(shots, "1-sign-in").await;
        self.wait_for("the portal's sign-in link", Locator::LinkText("Sign in"))
            .await
            .click()
            .await
            .expect("click sign in");
        let username = self
            .wait_for("the provider's login form", Locator::Id("username"))
            .await;
        self.screenshot(shots, "1b-identity-provider").await;
        username.send_keys(user).await.expect("type the user name");
        c.find(Locator::Id("password"))
            .await
            .expect("a password field")
            .send_keys(password)
            .await
            .expect("type the password");
        c.find(Locator::Id("loginbut"))
            .await
            .expect("the OK button")
            .click()
            .await
            .expect("log in");
        // Logged in, the provider asks whether to continue to the portal's client.
        self.wait_for(
            "the provider's Continue",
            Locator::XPath("//button[normalize-space()='Continue']"),
        )
        .await
        .click()
        .await
        .expect("continue to the portal");
        self.wait_for(
            "back at the portal, signed in",
            Locator::Css("form[action='/tokens']"),
        )
        .await;
    }

    /// Ends the session (the browser quits) and stops the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
