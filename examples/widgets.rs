//! Prints where the widgets of a mock scene are after some actions, to write scripts against:
//! `cargo run --example widgets -- SCENE 'ACTIONS-JSON-ARRAY' id1 id2 …`.

use agentd_computer::{Action, ComputerProvider};
use agentd_mock::{MockDesktop, Scene};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("login", String::as_str);
    let actions: Vec<Action> = serde_json::from_str(args.get(2).map_or("[]", String::as_str))?;
    let desktop = MockDesktop::new(Scene::resolve(name, None)?, None)?;
    for action in &actions {
        desktop.perform(action).await?;
    }
    let state = desktop.state().await.unwrap_or_default();
    println!("screen: {}", state["screen"]);
    for id in args.iter().skip(3) {
        match desktop.widget_bounds(id) {
            Some((p, s)) => println!("{id}: center {:?} bounds {:?} {}", desktop.widget_center(id), p, s),
            None => println!("{id}: not on screen"),
        }
    }
    Ok(())
}
